-- statemachine_wf schema, version 1 (PostgreSQL).
-- wf_instances holds projections; wf_events is the truth; wf_tasks is the runnable queue.
CREATE TABLE wf_instances (
    id               uuid PRIMARY KEY,
    type             text NOT NULL,
    kind             text NOT NULL DEFAULT 'machine',
    status           text NOT NULL,
    step             text,
    step_attempts    integer NOT NULL DEFAULT 0,
    attempts         jsonb NOT NULL DEFAULT '{}',
    version          bigint NOT NULL DEFAULT 0,
    input            jsonb NOT NULL,
    progress         jsonb NOT NULL DEFAULT '{}',
    error            jsonb,
    cancel_requested boolean NOT NULL DEFAULT false,
    idempotency_key  text UNIQUE,
    priority         integer NOT NULL DEFAULT 100,
    parent_id        uuid,
    waiting_kind     text,
    waiting_token    text,
    waiting_until    timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX wf_instances_active ON wf_instances (status, type)
    WHERE status IN ('PENDING', 'RUNNING', 'STALLED');

CREATE TABLE wf_events (
    seq         bigserial PRIMARY KEY,
    instance_id uuid NOT NULL REFERENCES wf_instances (id) ON DELETE CASCADE,
    node        text,
    event_type  text NOT NULL,
    attempt     integer,
    payload     jsonb NOT NULL DEFAULT '{}',
    error       jsonb,
    worker      text,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX wf_events_instance ON wf_events (instance_id, seq);
-- Rule 4: a duplicate delivery of a once-per-attempt event is refused before scheduling.
CREATE UNIQUE INDEX wf_events_once ON wf_events (instance_id, node, event_type, attempt)
    WHERE node IS NOT NULL
      AND event_type IN ('STEP_STARTED', 'STEP_COMPLETED', 'STEP_FAILED',
                         'NODE_STARTED', 'NODE_COMPLETED', 'NODE_FAILED', 'NODE_DISPATCHED');

-- One row per runnable unit: a state machine's current step (slot ''), or a DAG node.
-- A lease is due_at pushed forward: an expired lease is simply due again, no sweeper.
CREATE TABLE wf_tasks (
    id          bigserial PRIMARY KEY,
    instance_id uuid NOT NULL REFERENCES wf_instances (id) ON DELETE CASCADE,
    slot        text NOT NULL DEFAULT '',
    node        text NOT NULL,
    kind        text NOT NULL DEFAULT 'machine',
    type        text NOT NULL,
    priority    integer NOT NULL DEFAULT 100,
    due_at      timestamptz NOT NULL DEFAULT now(),
    attempt     integer NOT NULL DEFAULT 0,
    in_flight   boolean NOT NULL DEFAULT false,
    failures    integer NOT NULL DEFAULT 0,
    lease_owner text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (instance_id, slot)
);
CREATE INDEX wf_tasks_due ON wf_tasks (priority, due_at);
CREATE INDEX wf_tasks_type_due ON wf_tasks (type text_pattern_ops, due_at);

CREATE TABLE wf_dead_letters (
    id          bigserial PRIMARY KEY,
    instance_id uuid,
    envelope    jsonb NOT NULL,
    reason      text NOT NULL,
    worker      text,
    created_at  timestamptz NOT NULL DEFAULT now()
);
