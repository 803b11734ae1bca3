-- The leases a runner holds, found without reading every task. A heartbeat (every third of
-- the lease), a hand-back and a runner's shutdown pick a runner's tasks by lease_owner,
-- which no index led with: each read the whole of wf_tasks, due backlog and parked waits
-- included (a wait is due in a hundred years, so a due-time bound skips nothing). On
-- SQLite the heartbeat is a write, so every writer of every process waited for that read:
-- 5.5 ms at 100,000 tasks, 11 ms for the heartbeat that logs (bench/README.md, "The
-- heartbeat's read of every task"). Partial: only leased tasks are in it (a few per
-- worker), so a claim, a continue or a hand-back moves an entry in a one-page index.
CREATE INDEX wf_tasks_leased ON wf_tasks (lease_owner) WHERE lease_owner IS NOT NULL;
