-- statemachine_wf schema, version 1 (SQLite). Same logical schema as PostgreSQL:
-- uuids and JSON are TEXT, booleans INTEGER, times REAL (unix seconds).
CREATE TABLE wf_instances (
    id               TEXT PRIMARY KEY,
    type             TEXT NOT NULL,
    kind             TEXT NOT NULL DEFAULT 'machine',
    status           TEXT NOT NULL,
    step             TEXT,
    step_attempts    INTEGER NOT NULL DEFAULT 0,
    attempts         TEXT NOT NULL DEFAULT '{}',
    version          INTEGER NOT NULL DEFAULT 0,
    input            TEXT NOT NULL,
    progress         TEXT NOT NULL DEFAULT '{}',
    error            TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    idempotency_key  TEXT UNIQUE,
    priority         INTEGER NOT NULL DEFAULT 100,
    parent_id        TEXT,
    waiting_kind     TEXT,
    waiting_token    TEXT,
    waiting_until    REAL,
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL
);
CREATE INDEX wf_instances_active ON wf_instances (status, type)
    WHERE status IN ('PENDING', 'RUNNING', 'STALLED');

CREATE TABLE wf_events (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL REFERENCES wf_instances (id) ON DELETE CASCADE,
    node        TEXT,
    event_type  TEXT NOT NULL,
    attempt     INTEGER,
    payload     TEXT NOT NULL DEFAULT '{}',
    error       TEXT,
    worker      TEXT,
    created_at  REAL NOT NULL
);
CREATE INDEX wf_events_instance ON wf_events (instance_id, seq);
CREATE UNIQUE INDEX wf_events_once ON wf_events (instance_id, node, event_type, attempt)
    WHERE node IS NOT NULL
      AND event_type IN ('STEP_STARTED', 'STEP_COMPLETED', 'STEP_FAILED',
                         'NODE_STARTED', 'NODE_COMPLETED', 'NODE_FAILED', 'NODE_DISPATCHED');

CREATE TABLE wf_tasks (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL REFERENCES wf_instances (id) ON DELETE CASCADE,
    slot        TEXT NOT NULL DEFAULT '',
    node        TEXT NOT NULL,
    kind        TEXT NOT NULL DEFAULT 'machine',
    type        TEXT NOT NULL,
    priority    INTEGER NOT NULL DEFAULT 100,
    due_at      REAL NOT NULL,
    attempt     INTEGER NOT NULL DEFAULT 0,
    in_flight   INTEGER NOT NULL DEFAULT 0,
    failures    INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    created_at  REAL NOT NULL,
    UNIQUE (instance_id, slot)
);
CREATE INDEX wf_tasks_due ON wf_tasks (priority, due_at);
CREATE INDEX wf_tasks_type_due ON wf_tasks (type, due_at);

CREATE TABLE wf_dead_letters (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT,
    envelope    TEXT NOT NULL,
    reason      TEXT NOT NULL,
    worker      TEXT,
    created_at  REAL NOT NULL
);
