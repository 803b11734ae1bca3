-- The pick functions' queries planned once per connection, not on every call.
--
-- What was slow: a plpgsql function's query is a prepared statement whose parameters are
-- the function's arguments, and PostgreSQL re-plans such a statement for every call
-- (a custom plan) while a custom plan is estimated cheaper than the generic one. For the
-- picks it always is: the generic plan does not know the LIMIT. So every claim, DAG claim
-- and idle loop planned its walk again: swf_pick cost 240 us of server CPU a call where
-- the same walk with a generic plan costs 115 us (bench/README.md, "The pick functions
-- planned once"). The generic plans are the ones 015 pins: the walk down
-- wf_tasks_type_pick (swf_first_due: wf_tasks_type_due), whatever the statistics, since
-- the SET clauses of 015 price every other plan out.
ALTER FUNCTION swf_pick(text[], text, integer) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION swf_first_due(text[], text) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION swf_dag_pick(text[], integer) SET plan_cache_mode = force_generic_plan;
