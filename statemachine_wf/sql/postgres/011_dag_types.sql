-- DAG types are registered too (issue 9): a runner that hosts DAGs registers its
-- dag_types here, as runners register their state-machine types in wf_types (which stays
-- what a SQL producer may start). A type is one kind only: a name in one table is refused
-- in the other, here in the database (SQLSTATE SWF04), whoever writes it.

CREATE TABLE wf_dag_types (
    type          text PRIMARY KEY,
    registered_by text,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION swf_type_one_kind() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Two registrations of one name as two kinds in two transactions: the second waits
    -- here for the first to commit, then sees its row.
    PERFORM pg_advisory_xact_lock(hashtext('swf.type:' || NEW.type));
    IF TG_TABLE_NAME = 'wf_types'
            AND EXISTS (SELECT 1 FROM wf_dag_types d WHERE d.type = NEW.type) THEN
        RAISE EXCEPTION 'type % is registered as a DAG type; it cannot be a state-machine type',
            NEW.type USING ERRCODE = 'SWF04';
    END IF;
    IF TG_TABLE_NAME = 'wf_dag_types'
            AND EXISTS (SELECT 1 FROM wf_types t WHERE t.type = NEW.type) THEN
        RAISE EXCEPTION 'type % is registered as a state-machine type; it cannot be a DAG type',
            NEW.type USING ERRCODE = 'SWF04';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER wf_types_one_kind BEFORE INSERT OR UPDATE OF type ON wf_types
    FOR EACH ROW EXECUTE FUNCTION swf_type_one_kind();
CREATE TRIGGER wf_dag_types_one_kind BEFORE INSERT OR UPDATE OF type ON wf_dag_types
    FOR EACH ROW EXECUTE FUNCTION swf_type_one_kind();
