-- The timer a claim fires, applied: the claim calls this only for a claimed instance whose
-- one due pending row was its own timer (the claim's `bumped.fired`), which few claims
-- have. It was the claim's `fired` CTE, an UPDATE of wf_signals that every claim set up
-- (the table and its indexes opened, its join planned) and almost never ran: 2.5% of a
-- lone claim's server CPU (bench/README.md, "Session 59"; migration 025 says why a
-- function is the one place a rarely-needed write is not set up on every call). Returns
-- the applied row as the claim's `signals` (a one-element array), NULL when the row was
-- no longer pending. VOLATILE: the claim's own writes before the call are visible, and it
-- writes no row of the claim's statement (a finish in the same statement settles or voids
-- only its own instance's signals, and the claim never takes an instance that ends there).
CREATE FUNCTION swf_fire_timer(signal_id bigint, instance uuid)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    applied jsonb;
BEGIN
    WITH f AS (
        UPDATE wf_signals s SET state = 'applied', settled_at = now()
        WHERE s.id = signal_id AND s.instance_id = instance AND s.state = 'pending'
        RETURNING s.*
    )
    SELECT jsonb_agg(to_jsonb(f)) INTO applied FROM f;
    RETURN applied;
END
$$;
