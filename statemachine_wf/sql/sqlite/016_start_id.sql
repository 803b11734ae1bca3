-- wf_start refuses an id that is not a UUID in its canonical form (lowercase, hyphenated),
-- as the Python API does (definition.checks.check_id) and swf_start does on PostgreSQL
-- (its migration 016).
--
-- What was wrong: the trigger stored NEW.id as typed, any text at all: 'ABC...' (upper
-- case), '{...}', bare hex or 'not-a-uuid' became an instance the Python client could not
-- name (check_id refuses the spelling, the canonical id finds nothing), while PostgreSQL's
-- swf_start stored the canonical id. Now both refuse it and write nothing. SQLite's RAISE
-- takes a fixed message (in the SQLite versions supported), so it cannot quote the
-- canonical id as PostgreSQL does; it says what that form is. The rest as in migration 010.
DROP TRIGGER wf_start_insert;
CREATE TRIGGER wf_start_insert INSTEAD OF INSERT ON wf_start
BEGIN
    SELECT RAISE(ABORT, 'wf_start: type and input are required')
    WHERE NEW.type IS NULL OR NEW.input IS NULL;
    SELECT RAISE(ABORT, 'wf_start: input is not JSON') WHERE NOT json_valid(NEW.input);
    SELECT RAISE(ABORT, 'wf_start: input over the limit in wf_settings.max_payload_bytes')
    WHERE length(CAST(json(NEW.input) AS BLOB))
          > coalesce((SELECT CAST(value AS INTEGER) FROM wf_settings
                      WHERE name = 'max_payload_bytes'), 262144);
    SELECT RAISE(ABORT, 'wf_start: input nests deeper than 64 levels (the limit)')
    WHERE length(NEW.input) - length(replace(replace(NEW.input, '[', ''), '{', '')) > 64
      AND EXISTS (SELECT 1 FROM json_tree(NEW.input)
                  WHERE type IN ('object', 'array')
                    AND length(fullkey) - length(replace(replace(fullkey, '[', ''), '.', ''))
                        >= 64);
    SELECT RAISE(ABORT, 'wf_start: input contains a NUL character (\u0000)')
    WHERE instr(NEW.input, '\u0000') > 0;
    SELECT RAISE(ABORT, 'wf_start: priority must be >= 0')
    WHERE coalesce(NEW.priority, 100) < 0;
    SELECT RAISE(ABORT, 'wf_start: id is not a UUID in its canonical form, lowercase and hyphenated')
    WHERE NEW.id IS NOT NULL
      AND NOT (typeof(NEW.id) = 'text' AND length(NEW.id) = 36
               AND substr(NEW.id, 9, 1) = '-' AND substr(NEW.id, 14, 1) = '-'
               AND substr(NEW.id, 19, 1) = '-' AND substr(NEW.id, 24, 1) = '-'
               AND length(replace(NEW.id, '-', '')) = 32
               AND replace(NEW.id, '-', '') NOT GLOB '*[^0-9a-f]*');
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
