-- A DAG commit's refusal of a decision nothing vouches for any more.
--
-- A plain node completion (dag_vouch.blockers) may commit on a later version of its
-- instance than the one it was decided on, while one of the node tasks it names is still
-- open: a fan-out's branches run in several runner processes, and with the strict CAS
-- nearly every branch's commit lost to another process's and was decided again (0.92
-- lost CASes a node at 4 processes: bench/README.md, "Session 30"). dag_tail checks the
-- node's own task and the blockers after the instance row is locked, and when neither
-- vouches any more the statement must write nothing: this function ends it with
-- serialization_failure (40001), which the store reports as a lost CAS. Volatile, so it
-- runs only where the check reaches it.
CREATE FUNCTION swf_lost_race() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'a relaxed DAG commit: no blocker vouches for it any more'
        USING ERRCODE = 'serialization_failure';
END
$$;
