-- The claim's pick, per type (as SQLite's 015): the claim takes its candidates from
-- swf_pick (dag_claim from swf_dag_pick, below), a walk of each type's due tasks down
-- wf_tasks_type_pick in the claim's own order (priority, then due time) that stops at n,
-- whatever the backlog and whatever the other types hold. The index replaces
-- (priority, due_at), which only the picks used.
--
-- Why a function: it is the one place a plan can be pinned. Planned in the statement, the
-- pick followed the statistics: on a table not analyzed yet (a burst of starts; a server
-- with autovacuum off) it read every due task of the types through a bitmap scan and
-- sorted them for each claim (1.1 ms of server CPU a claim at 2,000 due, 11 ms at
-- 100,000). Its SET clauses hold for its own query only: with bitmap scans and sorts
-- priced out, the ordered index walk is the plan with or without statistics, and the
-- operator's reads on the same connections are planned as before. jit off: a sort that
-- is still needed (merging the types) carries the disabled-plan cost, which would pass
-- jit_above_cost and compile the query on every call (77 ms). plpgsql, so the plan
-- is cached per connection (a SQL function with SET clauses is planned on every call).
DROP INDEX wf_tasks_due;
CREATE INDEX wf_tasks_type_pick ON wf_tasks (type, priority, due_at);

CREATE FUNCTION swf_pick(types text[], task_kind text, n integer)
RETURNS TABLE (id bigint, priority integer, due_at timestamptz)
LANGUAGE plpgsql STABLE
ROWS 16  -- a few candidates, never the backlog: the callers join them to wf_tasks by id
SET enable_bitmapscan = off
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT w.id, w.priority, w.due_at
    FROM unnest(types) AS ty (type)
    CROSS JOIN LATERAL (
        SELECT t.id, t.priority, t.due_at FROM wf_tasks t
        WHERE t.type = ty.type AND t.due_at <= now() AND t.kind = task_kind
        ORDER BY t.priority, t.due_at
        LIMIT n
    ) AS w;
END
$$;

-- The idle loop's next due time, pinned the same way: per type, the first task off
-- (type, due_at) (unplanned, it sorted every task of the type, 0.44 ms of server CPU per
-- idle loop at 2,000). task_kind NULL: either kind.
CREATE FUNCTION swf_first_due(types text[], task_kind text)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET enable_bitmapscan = off
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
AS $$
BEGIN
    RETURN (
        SELECT min(x.due_at)
        FROM unnest(types) AS ty (type)
        CROSS JOIN LATERAL (
            SELECT t.due_at FROM wf_tasks t
            WHERE t.type = ty.type AND (task_kind IS NULL OR t.kind = task_kind)
            ORDER BY t.due_at
            LIMIT 1
        ) AS x
    );
END
$$;

-- The DAG claim's pick: the same walk, but each row locked as it is read, with its
-- instance's row (skipped when busy: a claim never waits while holding task rows). A
-- fan-out's 100 node tasks belong to one instance, which a racing claim holds: a fixed
-- number of unlocked candidates would all be that instance's, and the claim would come
-- back empty while other instances had work (join latency p50 3 -> 143 ms when it did).
-- With several types each walk may lock up to n rows and the best n are kept: the rest
-- stay locked until the claim commits (a racing claim passes them over meanwhile).
-- VOLATILE: it takes row locks, in the caller's transaction.
CREATE FUNCTION swf_dag_pick(types text[], n integer)
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
        FOR UPDATE OF t SKIP LOCKED
        FOR NO KEY UPDATE OF i SKIP LOCKED
    ) AS w
    ORDER BY w.priority, w.due_at
    LIMIT n;
END
$$;
