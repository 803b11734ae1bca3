-- swf_start refuses a non-canonical spelling of a UUID as its id, as the Python API does
-- (definition.checks.check_id), alike on both stores (SQLite's 016 does it in wf_start).
--
-- What was wrong: the id parameter was a uuid, so 'ABC...' (upper case), '{...}' or bare
-- hex became the canonical id before the function saw it: PostgreSQL stored and returned
-- the canonical id, while SQLite's wf_start stored the text as typed (any text at all), an
-- id the Python client then refused (check_id) and no canonical id found. Now both
-- refuse it with an error naming the canonical form (SQLSTATE 22P02, as the uuid cast's
-- own error for text that is no UUID), and write nothing.
--
-- Why anycompatible, not text: the function must see the spelling, so the parameter
-- cannot be a uuid; a text parameter would refuse a caller passing a uuid value (no
-- implicit cast from uuid to text: "function swf_start(..., uuid) does not exist").
-- anycompatible takes both: an untyped literal, a text parameter or NULL arrive as text
-- and are checked; a uuid arrives as a uuid, whose text is canonical; any other type's
-- text is checked like text. (Two functions, one per type, would make every call that
-- omits the id ambiguous.) The signature changes, so the old function is dropped, after
-- its grants are copied to the new one; the rest is as in migration 010.

CREATE FUNCTION swf_start(
    type            text,
    input           jsonb,
    idempotency_key text DEFAULT NULL,
    priority        integer DEFAULT 100,
    run_at          timestamptz DEFAULT NULL,
    id              anycompatible DEFAULT NULL
) RETURNS uuid
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
#variable_conflict use_column
DECLARE
    given text := swf_start.id::text;  -- the id as the caller spelled it (or NULL)
    hex text;
    new_id uuid;
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
    IF given IS NOT NULL
       AND given !~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        -- The spellings Python's uuid.UUID reads (upper case, {braces}, urn:uuid:, hyphens
        -- missing) name the canonical id to use; anything else is not a UUID.
        hex := lower(replace(btrim(replace(replace(given, 'urn:', ''), 'uuid:', ''), '{}'),
                             '-', ''));
        IF hex ~ '^[0-9a-f]{32}$' THEN
            RAISE EXCEPTION 'swf_start: id % is not a UUID in its canonical form, lowercase '
                            'and hyphenated: use %',
                quote_literal(given), quote_literal(hex::uuid::text)
                USING ERRCODE = 'invalid_text_representation';
        END IF;
        RAISE EXCEPTION 'swf_start: id % is not a UUID in its canonical form, lowercase and '
                        'hyphenated',
            CASE WHEN length(given) <= 60 THEN quote_literal(given)
                 ELSE format('of %s characters', length(given)) END
            USING ERRCODE = 'invalid_text_representation';
    END IF;
    new_id := coalesce(given::uuid, gen_random_uuid());
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

-- An operator's grants on the old function (say EXECUTE revoked from PUBLIC and granted to
-- a producer role) carry over; a NULL ACL is the default, which the new function has too.
DO $grants$
DECLARE
    acl aclitem[];
    item record;
BEGIN
    SELECT p.proacl INTO acl FROM pg_proc p
    WHERE p.oid = 'swf_start(text, jsonb, text, integer, timestamptz, uuid)'::regprocedure;
    IF acl IS NULL THEN
        RETURN;
    END IF;
    REVOKE ALL ON FUNCTION swf_start(text, jsonb, text, integer, timestamptz, anycompatible)
        FROM PUBLIC;
    FOR item IN
        SELECT a.grantee, bool_or(a.is_grantable) AS grantable
        FROM aclexplode(acl) a
        WHERE a.privilege_type = 'EXECUTE'
        GROUP BY a.grantee
    LOOP
        EXECUTE format(
            'GRANT EXECUTE ON FUNCTION swf_start(text, jsonb, text, integer, timestamptz, '
            'anycompatible) TO %s%s',
            CASE WHEN item.grantee = 0 THEN 'PUBLIC' ELSE item.grantee::regrole::text END,
            CASE WHEN item.grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$grants$;

DROP FUNCTION swf_start(text, jsonb, text, integer, timestamptz, uuid);
