-- Durable locks held by workflow instances (not processes): the per-signer transaction
-- slot is one. A holder keeps its lock across steps and runner crashes until it releases
-- it or ends; waiters are woken (their task made due) when it is released.
CREATE TABLE wf_locks (
    key    text PRIMARY KEY,
    holder uuid NOT NULL REFERENCES wf_instances (id) ON DELETE CASCADE,
    since  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX wf_locks_holder ON wf_locks (holder);

CREATE TABLE wf_lock_waiters (
    key         text NOT NULL,
    instance_id uuid NOT NULL REFERENCES wf_instances (id) ON DELETE CASCADE,
    since       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (key, instance_id)
);
