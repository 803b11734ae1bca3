-- The durable inbox (issue 5): producers in any language, dead-letter redrive, a
-- throttled heartbeat in the audit trail, soft delete and retention.

-- The types a runner hosts (registered when it starts, or by `statemachine-wf -m MOD
-- migrate`): what a SQL producer may start. A type nobody registered is dead-lettered
-- at once instead of waiting forever for a runner that does not exist.
CREATE TABLE wf_types (
    type          text PRIMARY KEY,
    registered_by text,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- Soft delete: a deleted (terminal) instance is hidden from list/status until purged.
ALTER TABLE wf_instances ADD COLUMN deleted_at timestamptz;
CREATE INDEX wf_instances_deleted ON wf_instances (deleted_at) WHERE deleted_at IS NOT NULL;
-- Retention scans finished instances by creation time. created_at never changes and
-- status is indexed already, so this index costs one entry per finished instance and
-- keeps the per-step updates of running instances HOT.
CREATE INDEX wf_instances_finished ON wf_instances (created_at)
    WHERE status IN ('COMPLETED', 'FAILED', 'CANCELLED');

-- The heartbeat logs a HEARTBEAT event for a claim held across heartbeats, at most every
-- N seconds: these remember which claim was last seen and when it was last logged.
ALTER TABLE wf_tasks ADD COLUMN heartbeat_token text;
ALTER TABLE wf_tasks ADD COLUMN heartbeat_at timestamptz;

-- A redriven dead letter is marked, never deleted.
ALTER TABLE wf_dead_letters ADD COLUMN redriven_at timestamptz;
ALTER TABLE wf_dead_letters ADD COLUMN redriven_by text;
ALTER TABLE wf_dead_letters ADD COLUMN redrive_instance_id uuid;

-- Settings the SQL side reads. max_payload_bytes: the largest input (swf_start) or
-- signal payload (INSERT INTO wf_signals) accepted, in bytes of the JSON text stored.
-- `migrate` writes SWF_MAX_PAYLOAD_BYTES here when that is set in its environment;
-- otherwise the row keeps its value (the Python default, 256 KiB, or what an operator
-- set with UPDATE).
CREATE TABLE wf_settings (
    name       text PRIMARY KEY,
    value      text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT wf_settings_max_payload_bytes
        CHECK (name <> 'max_payload_bytes' OR value ~ '^[1-9][0-9]{0,17}$')
);
INSERT INTO wf_settings (name, value) VALUES ('max_payload_bytes', '262144');

CREATE FUNCTION swf_max_payload_bytes() RETURNS bigint
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $fn$
    SELECT coalesce((SELECT value::bigint FROM wf_settings WHERE name = 'max_payload_bytes'),
                    262144)
$fn$;

-- The SQL contract for producers that are not Python: one statement starts a run.
--   SELECT swf_start('billing.invoice.v1', '{"invoice": 7}'::jsonb,
--                    idempotency_key => 'invoice:7', priority => 10,
--                    run_at => now() + interval '5 minutes');
-- returns the instance id (the existing one for a known idempotency key). The initial
-- step is not known to SQL: the task starts at the sentinel step '' and the runner that
-- claims it resolves it to the workflow's initial step (and validates the input: an
-- input that does not fit is failed and dead-lettered). An unknown type is
-- dead-lettered here and NULL is returned, with a WARNING.
CREATE FUNCTION swf_start(
    type            text,
    input           jsonb,
    idempotency_key text DEFAULT NULL,
    priority        integer DEFAULT 100,
    run_at          timestamptz DEFAULT NULL,
    id              uuid DEFAULT NULL
) RETURNS uuid
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
#variable_conflict use_column
DECLARE
    new_id uuid := coalesce(swf_start.id, gen_random_uuid());
    found_id uuid;
    size bigint;
    cap bigint := swf_max_payload_bytes();
BEGIN
    IF swf_start.type IS NULL OR swf_start.input IS NULL THEN
        RAISE EXCEPTION 'swf_start: type and input are required'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    size := octet_length(swf_start.input::text);
    IF size > cap THEN
        RAISE EXCEPTION 'swf_start: input is % bytes; the limit is % bytes', size, cap
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'the limit is wf_settings.max_payload_bytes';
    END IF;
    IF swf_start.priority IS NULL OR swf_start.priority < 0 THEN
        RAISE EXCEPTION 'swf_start: priority must be >= 0, got %', swf_start.priority
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF swf_start.idempotency_key IS NOT NULL THEN
        SELECT i.id INTO found_id FROM wf_instances i
        WHERE i.idempotency_key = swf_start.idempotency_key;
        IF found_id IS NOT NULL THEN
            RETURN found_id;
        END IF;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM wf_types t WHERE t.type = swf_start.type) THEN
        INSERT INTO wf_dead_letters (instance_id, envelope, reason, worker)
        SELECT NULL,
               jsonb_build_object('type', swf_start.type, 'input', swf_start.input,
                                  'idempotency_key', swf_start.idempotency_key,
                                  'priority', swf_start.priority,
                                  'run_at', extract(epoch FROM swf_start.run_at)::float8,
                                  'source', 'sql'),
               format('unknown workflow type %L: no runner has registered it',
                      swf_start.type),
               'sql:' || current_user
        WHERE swf_start.idempotency_key IS NULL
           OR NOT EXISTS (SELECT 1 FROM wf_dead_letters d
                          WHERE d.redriven_at IS NULL
                            AND d.envelope ->> 'idempotency_key' = swf_start.idempotency_key);
        RAISE WARNING 'swf_start: unknown workflow type %; dead-lettered', swf_start.type;
        RETURN NULL;
    END IF;
    INSERT INTO wf_instances (id, type, kind, status, step, input, idempotency_key, priority)
    VALUES (new_id, swf_start.type, 'machine', 'PENDING', NULL, swf_start.input,
            swf_start.idempotency_key, swf_start.priority)
    ON CONFLICT (idempotency_key) DO NOTHING;
    IF NOT FOUND THEN  -- a concurrent start with the same key won
        SELECT i.id INTO found_id FROM wf_instances i
        WHERE i.idempotency_key = swf_start.idempotency_key;
        RETURN found_id;
    END IF;
    INSERT INTO wf_events (instance_id, event_type, payload)
    VALUES (new_id, 'WORKFLOW_CREATED',
            jsonb_build_object('input', swf_start.input, 'initial', NULL, 'source', 'sql'));
    INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at)
    VALUES (new_id, '', '', 'machine', swf_start.type, swf_start.priority,
            coalesce(swf_start.run_at, now()));
    PERFORM pg_notify('swf_wake_' || current_schema(), swf_start.type);
    RETURN new_id;
END
$fn$;
