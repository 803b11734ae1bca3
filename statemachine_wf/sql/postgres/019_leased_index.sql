-- The leases a runner holds, found without reading every task (as SQLite's 019). A
-- heartbeat (every third of the lease), a hand-back and a runner's shutdown pick a
-- runner's tasks by lease_owner, which no index led with: each read the whole of
-- wf_tasks, due backlog and parked waits included (5.3 ms at 100,000 tasks before the
-- table had statistics; with them, a walk of the whole of wf_tasks_type_pick). Partial:
-- only leased tasks are in it.
CREATE INDEX wf_tasks_leased ON wf_tasks (lease_owner) WHERE lease_owner IS NOT NULL;
