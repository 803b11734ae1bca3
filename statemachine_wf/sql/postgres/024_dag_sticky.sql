-- A DAG node task that a runner's commit dispatches is left to that runner for a moment
-- (PostgresStore(dag_sticky=), 1 s by default): `sticky_to` names the runner (its worker
-- id), `sticky_until` when the others may take it. Temporal keeps a workflow's tasks on
-- the worker that holds its history the same way (its sticky queue, given up after a
-- schedule-to-start timeout).
--
-- Why: the branches of a fan-out, claimed by every runner process, were committed by all
-- of them at once: each process's view of the instance fell behind the others' commits
-- (a read of the log's tail before many decisions), its CAS lost to theirs (commits on
-- blockers' word, never grouped), and four processes spent 2 ms of CPU a node against
-- 0.85 for one. Kept to the runner that dispatched them, they run and commit where the
-- instance's view is, grouped; the other processes take other instances' tasks, and a
-- dispatching runner that died or stays busy leaves its tasks to them once sticky_until
-- passes (bench/README.md, "Session 51"; docs/architecture.md, "A DAG instance's tasks
-- kept to their runner"). Nothing else reads the columns: leases, CAS and fencing are
-- as they were, so a task kept too long is late, never lost or run twice.
ALTER TABLE wf_tasks ADD COLUMN sticky_to text, ADD COLUMN sticky_until timestamptz;

-- 018's pick, for runner `me`: another runner's task is passed over while it is sticky
-- (filtered before the locking clauses: a passed-over row is not locked).
CREATE FUNCTION swf_dag_pick(types text[], n integer, me text)
RETURNS TABLE (id bigint)
LANGUAGE plpgsql VOLATILE
ROWS 4
SET enable_bitmapscan = off
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
SET plan_cache_mode = force_generic_plan
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
          AND (t.sticky_until IS NULL OR t.sticky_until <= now() OR t.sticky_to = me)
        ORDER BY t.priority, t.due_at
        LIMIT n
        FOR NO KEY UPDATE OF i SKIP LOCKED
        FOR UPDATE OF t SKIP LOCKED
    ) AS w
    ORDER BY w.priority, w.due_at
    LIMIT n;
END
$$;

-- swf_first_due's DAG walk for runner `me`: the first due time of a task it may take
-- (its own, nobody's, or one whose stickiness has passed), or the moment another runner's
-- sticky task becomes its to take, whichever is sooner. An idle runner sleeps until then
-- instead of claiming, finding only others' tasks, and asking again at once. `me` empty:
-- every task at its due time (run_until_idle: another's sticky task is work left).
CREATE FUNCTION swf_first_due_dag(types text[], me text)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET enable_bitmapscan = off
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN least(
        (SELECT min(x.due_at)
         FROM unnest(types) AS ty (type)
         CROSS JOIN LATERAL (
             SELECT t.due_at FROM wf_tasks t
             WHERE t.type = ty.type AND t.kind = 'dag'
               AND (me = '' OR t.sticky_until IS NULL OR t.sticky_until <= now()
                    OR t.sticky_to = me)
             ORDER BY t.due_at
             LIMIT 1
         ) AS x),
        -- Among the first few by due time only: a filter down the whole index would read
        -- every task of the type when none is sticky, at each idle loop. Others' sticky
        -- tasks that are due come first in that order; any further down are found once
        -- this runner wakes at the first due time above and asks again.
        (SELECT min(greatest(x.due_at, x.sticky_until))
         FROM unnest(types) AS ty (type)
         CROSS JOIN LATERAL (
             SELECT t.due_at, t.sticky_to, t.sticky_until FROM wf_tasks t
             WHERE t.type = ty.type AND t.kind = 'dag'
             ORDER BY t.due_at
             LIMIT 8
         ) AS x
         WHERE me <> '' AND x.sticky_until > now() AND x.sticky_to IS DISTINCT FROM me)
    );
END
$$;
