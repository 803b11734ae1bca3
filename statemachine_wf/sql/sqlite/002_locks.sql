-- Durable locks held by workflow instances (see the PostgreSQL migration for the why).
CREATE TABLE wf_locks (
    key    TEXT PRIMARY KEY,
    holder TEXT NOT NULL REFERENCES wf_instances (id) ON DELETE CASCADE,
    since  REAL NOT NULL
);
CREATE INDEX wf_locks_holder ON wf_locks (holder);

CREATE TABLE wf_lock_waiters (
    key         TEXT NOT NULL,
    instance_id TEXT NOT NULL REFERENCES wf_instances (id) ON DELETE CASCADE,
    since       REAL NOT NULL,
    PRIMARY KEY (key, instance_id)
);
