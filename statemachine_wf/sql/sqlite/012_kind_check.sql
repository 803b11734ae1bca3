-- An instance is of a kind the runtime knows: see the PostgreSQL migration of the same
-- number. SQLite cannot add a CHECK to a table, so two triggers refuse it instead.

CREATE TRIGGER wf_instances_kind_insert BEFORE INSERT ON wf_instances
WHEN NEW.kind NOT IN ('machine', 'dag')
BEGIN
    SELECT RAISE(ABORT, 'wf_instances: kind must be machine or dag');
END;

CREATE TRIGGER wf_instances_kind_update BEFORE UPDATE OF kind ON wf_instances
WHEN NEW.kind NOT IN ('machine', 'dag')
BEGIN
    SELECT RAISE(ABORT, 'wf_instances: kind must be machine or dag');
END;
