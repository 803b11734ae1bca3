-- The durable inbox (issue 5): see the PostgreSQL migration of the same number.
CREATE TABLE wf_types (
    type          TEXT PRIMARY KEY,
    registered_by TEXT,
    updated_at    REAL NOT NULL
);

ALTER TABLE wf_instances ADD COLUMN deleted_at REAL;
CREATE INDEX wf_instances_deleted ON wf_instances (deleted_at) WHERE deleted_at IS NOT NULL;
CREATE INDEX wf_instances_finished ON wf_instances (created_at)
    WHERE status IN ('COMPLETED', 'FAILED', 'CANCELLED');

ALTER TABLE wf_tasks ADD COLUMN heartbeat_token TEXT;
ALTER TABLE wf_tasks ADD COLUMN heartbeat_at REAL;

ALTER TABLE wf_dead_letters ADD COLUMN redriven_at REAL;
ALTER TABLE wf_dead_letters ADD COLUMN redriven_by TEXT;
ALTER TABLE wf_dead_letters ADD COLUMN redrive_instance_id TEXT;

-- Settings the SQL side reads (see the PostgreSQL migration of the same number).
CREATE TABLE wf_settings (
    name       TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    updated_at REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    CONSTRAINT wf_settings_max_payload_bytes
        CHECK (name <> 'max_payload_bytes'
               OR (value NOT GLOB '*[^0-9]*' AND value NOT GLOB '0*' AND length(value) <= 18))
);
INSERT INTO wf_settings (name, value) VALUES ('max_payload_bytes', '262144');

-- The SQL contract for producers that are not Python: one INSERT starts a run.
--   INSERT INTO wf_start (type, input, idempotency_key, priority, run_at)
--   VALUES ('billing.invoice.v1', '{"invoice": 7}', 'invoice:7', 10, NULL);
-- run_at is unix seconds (NULL: now); id may be given, else a uuid4 is generated (find
-- it by idempotency key). A known key inserts nothing; an unknown type is dead-lettered.
-- The task starts at the sentinel step '' that the claiming runner resolves.
CREATE VIEW wf_start (id, type, input, idempotency_key, priority, run_at) AS
    SELECT NULL, NULL, NULL, NULL, NULL, NULL WHERE 0;

CREATE TRIGGER wf_start_insert INSTEAD OF INSERT ON wf_start
BEGIN
    SELECT RAISE(ABORT, 'wf_start: type and input are required')
    WHERE NEW.type IS NULL OR NEW.input IS NULL;
    SELECT RAISE(ABORT, 'wf_start: input is not JSON') WHERE NOT json_valid(NEW.input);
    SELECT RAISE(ABORT, 'wf_start: input over the limit in wf_settings.max_payload_bytes')
    WHERE length(CAST(json(NEW.input) AS BLOB))
          > coalesce((SELECT CAST(value AS INTEGER) FROM wf_settings
                      WHERE name = 'max_payload_bytes'), 262144);
    SELECT RAISE(ABORT, 'wf_start: priority must be >= 0')
    WHERE coalesce(NEW.priority, 100) < 0;
    INSERT INTO wf_dead_letters (instance_id, envelope, reason, worker, created_at)
    SELECT NULL,
           json_object('type', NEW.type, 'input', json(NEW.input),
                       'idempotency_key', NEW.idempotency_key,
                       'priority', coalesce(NEW.priority, 100), 'run_at', NEW.run_at,
                       'source', 'sql'),
           'unknown workflow type ''' || NEW.type || ''': no runner has registered it',
           'sql', (julianday('now') - 2440587.5) * 86400.0
    WHERE NOT EXISTS (SELECT 1 FROM wf_types WHERE type = NEW.type)
      AND (NEW.idempotency_key IS NULL
           OR (NOT EXISTS (SELECT 1 FROM wf_instances WHERE idempotency_key = NEW.idempotency_key)
               AND NOT EXISTS (SELECT 1 FROM wf_dead_letters
                               WHERE redriven_at IS NULL
                                 AND json_extract(envelope, '$.idempotency_key')
                                     = NEW.idempotency_key)));
    INSERT INTO wf_instances (id, type, kind, status, step, input, idempotency_key, priority,
                              created_at, updated_at)
    SELECT coalesce(NEW.id,
                    lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4'
                          || substr(hex(randomblob(2)), 2) || '-'
                          || substr('89ab', 1 + (abs(random()) % 4), 1)
                          || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6)))),
           NEW.type, 'machine', 'PENDING', NULL, json(NEW.input), NEW.idempotency_key,
           coalesce(NEW.priority, 100),
           (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0
    WHERE EXISTS (SELECT 1 FROM wf_types WHERE type = NEW.type)
      AND (NEW.idempotency_key IS NULL
           OR NOT EXISTS (SELECT 1 FROM wf_instances WHERE idempotency_key = NEW.idempotency_key));
    -- changes() and last_insert_rowid() see the trigger's own statements: the event and
    -- the task are written only when the instance row above was.
    INSERT INTO wf_events (instance_id, event_type, payload, created_at)
    SELECT id, 'WORKFLOW_CREATED',
           json_object('input', json(input), 'initial', NULL, 'source', 'sql'), created_at
    FROM wf_instances WHERE changes() = 1 AND rowid = last_insert_rowid();
    INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at, created_at)
    SELECT i.id, '', '', 'machine', i.type, i.priority, coalesce(NEW.run_at, i.created_at),
           i.created_at
    FROM wf_events e JOIN wf_instances i ON i.id = e.instance_id
    WHERE changes() = 1 AND e.seq = last_insert_rowid() AND e.event_type = 'WORKFLOW_CREATED';
END;
