-- The DAG claim's pick (swf_dag_pick, migration 015) locks a candidate's instance row
-- before its task row: an instance whose row is held (a commit under way) is passed over
-- with none of its task rows locked.
--
-- What was wrong: PostgreSQL takes a row's locks in the order of the locking clauses, and
-- 015 named the task first. A claim walking a busy instance's due tasks (a fan-out's
-- branches, while a branch's commit holds the instance row) locked every one of them,
-- found the instance locked, skipped each, and kept those task locks to the end of its
-- statement. The commit's sibling take (dag_tail: another due task of the instance, SKIP
-- LOCKED) then found none free, and its worker claimed the next branch instead of taking
-- it in the commit. The walk also wrote a row lock into every task it passed over.
--
-- Claims still never wait (both clauses SKIP LOCKED), and a claim still takes no task of
-- an instance another claim or commit holds; only the order changed. The rest of the
-- function is 015's.
CREATE OR REPLACE FUNCTION swf_dag_pick(types text[], n integer)
RETURNS TABLE (id bigint)
LANGUAGE plpgsql VOLATILE
ROWS 4
SET enable_bitmapscan = off
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT w.id
    FROM unnest(types) AS ty (type)
    CROSS JOIN LATERAL (
        SELECT t.id, t.priority, t.due_at FROM wf_tasks t
        JOIN wf_instances i ON i.id = t.instance_id
        WHERE t.type = ty.type AND t.due_at <= now() AND t.kind = 'dag'
        ORDER BY t.priority, t.due_at
        LIMIT n
        -- The instance first: busy, its task rows are passed over without a lock.
        FOR NO KEY UPDATE OF i SKIP LOCKED
        FOR UPDATE OF t SKIP LOCKED
    ) AS w
    ORDER BY w.priority, w.due_at
    LIMIT n;
END
$$;
