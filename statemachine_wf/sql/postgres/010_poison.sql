-- Poison values (issue 9): a JSON value nested deeper than 64 levels is refused at every
-- SQL producer path (swf_start, INSERT INTO wf_signals), as the Python API refuses it
-- (statemachine_wf.limits.MAX_JSON_DEPTH): Python's decoder gives up near 1,000 levels, so
-- a deeper row could be stored but never read back. And the checks on wf_signals now run
-- for every kind: a row of kind 'timer' from SQL skipped them all.

CREATE FUNCTION swf_max_json_depth() RETURNS integer
LANGUAGE sql IMMUTABLE AS $fn$ SELECT 64 $fn$;

-- True when j nests deeper than swf_max_json_depth() levels of objects and arrays: some
-- container sits at level 64 below the top (the top is level 0). jsonpath's .** walks in
-- C and stops at that level: about 1 ms for 256 KiB. The bracket count skips the walk
-- for the common shallow value.
CREATE FUNCTION swf_json_too_deep(j jsonb) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE SET search_path FROM CURRENT AS $fn$
DECLARE
    t text;
BEGIN
    IF j IS NULL OR jsonb_typeof(j) NOT IN ('object', 'array') THEN
        RETURN false;
    END IF;
    t := j::text;
    IF length(t) - length(translate(t, '[{', '')) <= swf_max_json_depth() THEN
        RETURN false;
    END IF;
    RETURN jsonb_path_exists(
        j,
        format('strict $.**{%s} ? (@.type() == "array" || @.type() == "object")',
               swf_max_json_depth())::jsonpath);
END
$fn$;


-- Signals: every kind is checked (a 'timer' row from SQL skipped every check). The
-- payload limit and depth for every kind; for kinds other than 'signal' (which
-- wf_signal_arrived checks) also: pending, an instance that exists and has not ended.
CREATE OR REPLACE FUNCTION wf_signal_payload_limit() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    size bigint := octet_length(NEW.payload::text);
    cap  bigint := swf_max_payload_bytes();
    st   text;
BEGIN
    IF size > cap THEN
        RAISE EXCEPTION 'wf_signals: signal % payload is % bytes; the limit is % bytes',
            quote_literal(NEW.name), size, cap
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'the limit is wf_settings.max_payload_bytes';
    END IF;
    IF swf_json_too_deep(NEW.payload) THEN
        RAISE EXCEPTION 'wf_signals: signal % payload nests deeper than % levels (the limit)',
            quote_literal(NEW.name), swf_max_json_depth()
            USING ERRCODE = 'SWF03';
    END IF;
    IF NEW.kind <> 'signal' THEN
        IF NEW.state <> 'pending' THEN
            RAISE EXCEPTION 'wf_signals: a new % must be pending, not %', NEW.kind, NEW.state
                USING ERRCODE = 'check_violation';
        END IF;
        SELECT status INTO st FROM wf_instances WHERE id = NEW.instance_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'wf_signals: no workflow instance %', NEW.instance_id
                USING ERRCODE = 'SWF01';
        END IF;
        IF st IN ('COMPLETED', 'FAILED', 'CANCELLED') THEN
            RAISE EXCEPTION 'wf_signals: workflow instance % is %; it takes no more signals',
                NEW.instance_id, st USING ERRCODE = 'SWF02';
        END IF;
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER wf_signals_a_payload_limit ON wf_signals;
CREATE TRIGGER wf_signals_a_payload_limit BEFORE INSERT ON wf_signals
FOR EACH ROW EXECUTE FUNCTION wf_signal_payload_limit();

-- swf_start: the depth check (SQLSTATE SWF03); the rest as in migration 006.
CREATE OR REPLACE FUNCTION swf_start(
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
    IF swf_json_too_deep(swf_start.input) THEN
        RAISE EXCEPTION 'swf_start: input nests deeper than % levels (the limit)',
            swf_max_json_depth()
            USING ERRCODE = 'SWF03';
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
