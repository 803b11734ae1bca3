-- DAG types are registered too (issue 9): see the PostgreSQL migration of the same
-- number. A type is one kind only: a name in one table is refused in the other.

CREATE TABLE wf_dag_types (
    type          TEXT PRIMARY KEY,
    registered_by TEXT,
    updated_at    REAL NOT NULL
);

CREATE TRIGGER wf_types_one_kind BEFORE INSERT ON wf_types
WHEN EXISTS (SELECT 1 FROM wf_dag_types WHERE type = NEW.type)
BEGIN
    SELECT RAISE(ABORT, 'type is registered as a DAG type; it cannot be a state-machine type');
END;

CREATE TRIGGER wf_dag_types_one_kind BEFORE INSERT ON wf_dag_types
WHEN EXISTS (SELECT 1 FROM wf_types WHERE type = NEW.type)
BEGIN
    SELECT RAISE(ABORT, 'type is registered as a state-machine type; it cannot be a DAG type');
END;
