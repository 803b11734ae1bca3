-- The claim's pick, per type: a walk of one type's tasks in the claim's own order
-- (priority, then due time) that stops at the claim's limit, whatever the backlog and
-- whatever the other types hold (claim and dag_claim name it: INDEXED BY). It replaces
-- (priority, due_at), which only those picks used: a walk of it passes every other
-- type's due tasks first (26 ms a claim under 50,000 due tasks of another type).
-- Left to itself the planner took (type, due_at) and sorted every due task of the types
-- for each claim: bench/README.md, "Claim and backlog".
DROP INDEX wf_tasks_due;
CREATE INDEX wf_tasks_type_pick ON wf_tasks (type, priority, due_at);
