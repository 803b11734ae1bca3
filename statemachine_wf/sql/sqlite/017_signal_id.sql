-- INSERT INTO wf_signals takes an instance id in any spelling PostgreSQL's uuid type
-- reads, and stores the canonical id (lowercase, hyphenated), as PostgreSQL does.
--
-- What was wrong: on PostgreSQL wf_signals.instance_id is a uuid, so 'ABC...' (upper or
-- mixed case), '{...}' or 32 hex digits without hyphens name the instance whose canonical
-- id that is; SQLite's trigger compared the text as typed and refused the same statement
-- with "no such workflow instance" (the instance exists).
--
-- The spellings are PostgreSQL's (its uuid_in): 32 hex digits, in either case, with a
-- hyphen allowed after any group of four (never first, last or doubled), the whole
-- optionally in braces; nothing else (no spaces, no 'urn:uuid:'). The hyphen rule is
-- checked by splitting the text at its hyphens (json_each over the pieces): every piece
-- holds a multiple of four hex digits. An id stored exactly as typed still wins: SQLite's
-- wf_start kept any text as an id before migration 016, and such an instance still takes
-- its signals by that text. Text that is not a UUID, or a UUID no instance has, is still
-- "no such workflow instance"; a refused insert writes nothing.
--
-- A BEFORE trigger cannot change NEW, so the check trigger looks the instance up under
-- the canonical id, and the AFTER trigger rewrites the row's instance_id to it first,
-- then bumps the version of and wakes the instance the row now names (one trigger, so the
-- order is fixed; it runs for every kind, as the check does since 010, so a timer row
-- from SQL is rewritten too). The foreign key holds: SQLite checks an immediate foreign
-- key at the end of the statement, after the rewrite. A RETURNING clause on the INSERT
-- still shows the id as typed (RETURNING does not see what triggers change).
--
-- The check trigger is otherwise as in migration 010, the arrived trigger as in 005.
-- SQLite fires the newest trigger first, so the payload limit's is made again, unchanged,
-- after the check's: a payload over the limit is still refused as that first, whatever
-- the instance (as after 010, and as on PostgreSQL, where it fires first by name).

DROP TRIGGER wf_signals_check;
CREATE TRIGGER wf_signals_check BEFORE INSERT ON wf_signals
BEGIN
    SELECT RAISE(ABORT, 'wf_signals: a new signal must be pending')
    WHERE NEW.state <> 'pending';
    SELECT CASE WHEN status IS NULL THEN RAISE(ABORT, 'wf_signals: no such workflow instance')
                WHEN status IN ('COMPLETED', 'FAILED', 'CANCELLED')
                THEN RAISE(ABORT, 'wf_signals: the workflow instance has ended') END
    FROM (SELECT coalesce(
        (SELECT status FROM wf_instances WHERE id = NEW.instance_id),
        (SELECT status FROM wf_instances WHERE id = (
            -- the canonical id of NEW.instance_id (NULL when it is no UUID spelling)
            SELECT lower(substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-' || substr(h, 13, 4)
                         || '-' || substr(h, 17, 4) || '-' || substr(h, 21, 12))
            FROM (SELECT t, replace(t, '-', '') AS h
                  FROM (SELECT CASE WHEN NEW.instance_id GLOB '{*}'
                                    THEN substr(NEW.instance_id, 2, length(NEW.instance_id) - 2)
                                    ELSE NEW.instance_id END AS t
                        WHERE typeof(NEW.instance_id) = 'text'
                          AND instr(NEW.instance_id, char(0)) = 0))
            WHERE length(h) = 32
              AND NOT EXISTS (SELECT 1
                              FROM json_each(CASE WHEN t GLOB '*[^0-9A-Fa-f-]*' THEN '[""]'
                                                  ELSE '["' || replace(t, '-', '","') || '"]'
                                             END)
                              WHERE value = '' OR length(value) % 4 <> 0)))
    ) AS status);
    SELECT RAISE(ABORT, 'wf_signals: payload nests deeper than 64 levels (the limit)')
    WHERE length(NEW.payload) - length(replace(replace(NEW.payload, '[', ''), '{', '')) > 64
      AND CASE WHEN json_valid(NEW.payload)
               THEN EXISTS (SELECT 1 FROM json_tree(NEW.payload)
                            WHERE type IN ('object', 'array')
                              AND length(fullkey)
                                  - length(replace(replace(fullkey, '[', ''), '.', '')) >= 64)
               ELSE 1 END;  -- not JSON to SQLite (deeper than it parses): refused as deep
    SELECT RAISE(ABORT, 'wf_signals: payload contains a NUL character (\u0000)')
    WHERE instr(NEW.payload, '\u0000') > 0 OR instr(NEW.payload, char(0)) > 0;
    SELECT RAISE(ABORT, 'wf_signals: name contains a NUL character')
    WHERE instr(NEW.name, char(0)) > 0;
END;

DROP TRIGGER wf_signals_payload_limit;
CREATE TRIGGER wf_signals_payload_limit BEFORE INSERT ON wf_signals
BEGIN
    SELECT RAISE(ABORT, 'wf_signals: payload over the limit in wf_settings.max_payload_bytes')
    WHERE length(CAST(NEW.payload AS BLOB))
          > coalesce((SELECT CAST(value AS INTEGER) FROM wf_settings
                      WHERE name = 'max_payload_bytes'), 262144);
END;

DROP TRIGGER wf_signals_arrived;
CREATE TRIGGER wf_signals_arrived AFTER INSERT ON wf_signals
BEGIN
    -- The canonical id, unless an instance has the id as typed (then nothing changes).
    UPDATE wf_signals SET instance_id = (
        SELECT lower(substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-' || substr(h, 13, 4)
                     || '-' || substr(h, 17, 4) || '-' || substr(h, 21, 12))
        FROM (SELECT t, replace(t, '-', '') AS h
              FROM (SELECT CASE WHEN NEW.instance_id GLOB '{*}'
                                THEN substr(NEW.instance_id, 2, length(NEW.instance_id) - 2)
                                ELSE NEW.instance_id END AS t
                    WHERE typeof(NEW.instance_id) = 'text'
                      AND instr(NEW.instance_id, char(0)) = 0))
        WHERE length(h) = 32
          AND NOT EXISTS (SELECT 1
                          FROM json_each(CASE WHEN t GLOB '*[^0-9A-Fa-f-]*' THEN '[""]'
                                              ELSE '["' || replace(t, '-', '","') || '"]' END)
                          WHERE value = '' OR length(value) % 4 <> 0))
    WHERE id = NEW.id AND NOT EXISTS (SELECT 1 FROM wf_instances WHERE id = NEW.instance_id);
    UPDATE wf_instances SET version = version + 1
    WHERE NEW.kind = 'signal' AND id = (SELECT instance_id FROM wf_signals WHERE id = NEW.id);
    UPDATE wf_tasks SET due_at = min(due_at, NEW.due_at)
    WHERE NEW.kind = 'signal'
      AND instance_id = (SELECT instance_id FROM wf_signals WHERE id = NEW.id)
      AND slot = '' AND lease_owner IS NULL
      AND EXISTS (SELECT 1 FROM wf_instances i
                  WHERE i.id = wf_tasks.instance_id AND i.waiting_token IS NOT NULL
                    AND (NEW.token IS NOT NULL
                         OR json_extract(i.waits, '$."' || i.waiting_key || '".name') = NEW.name));
END;
