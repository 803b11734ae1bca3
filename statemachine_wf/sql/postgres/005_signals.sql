-- Signals and timers (issue 5). A wait (ctx.wait_for, ctx.sleep) records its entry in
-- wf_instances.waits (the projection: token, deadline, outcome per wait of the current
-- step) and parks the task; waiting_kind/token/until mirror the wait in progress for SQL.
ALTER TABLE wf_instances ADD COLUMN waits jsonb NOT NULL DEFAULT '{}';
ALTER TABLE wf_instances ADD COLUMN waiting_key text;

-- One row per signal or timer; a timer is a signal due later (kind 'timer', written by the
-- runner with the wait's token). Rows are never deleted to reschedule: a new wait has a new
-- token and the old rows become stale. state: pending -> applied | stale | dead | void.
--
-- The producer contract (any language): one INSERT, e.g.
--   INSERT INTO wf_signals (instance_id, name, payload, token)
--   VALUES ('<instance uuid>', 'approved', '{"by": "ann"}', NULL);
-- token NULL: buffered until a wait for that name consumes it; a token: applied only to
-- the wait that has it, dropped as stale otherwise. due_at (default now) delays delivery.
-- The trigger refuses an unknown or ended instance (SQLSTATE SWF01 / SWF02, nothing
-- written) and wakes the instance if it waits for it, in the same transaction.
CREATE TABLE wf_signals (
    id          bigserial PRIMARY KEY,
    instance_id uuid NOT NULL REFERENCES wf_instances (id) ON DELETE CASCADE,
    kind        text NOT NULL DEFAULT 'signal' CHECK (kind IN ('signal', 'timer')),
    name        text NOT NULL,
    payload     jsonb NOT NULL DEFAULT 'null',
    token       text,
    due_at      timestamptz NOT NULL DEFAULT now(),
    state       text NOT NULL DEFAULT 'pending'
                CHECK (state IN ('pending', 'applied', 'stale', 'dead', 'void')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    settled_at  timestamptz
);
CREATE INDEX wf_signals_pending ON wf_signals (instance_id, due_at) WHERE state = 'pending';
CREATE INDEX wf_signals_instance ON wf_signals (instance_id, id);
CREATE INDEX wf_signals_state ON wf_signals (state);

-- Bumping the version serialises the signal with the runner's commits on the instance:
-- a runner that decided to park without seeing this row loses its CAS and decides again.
CREATE FUNCTION wf_signal_arrived() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    st    text;
    tok   text;
    wname text;
BEGIN
    IF NEW.state <> 'pending' THEN
        RAISE EXCEPTION 'wf_signals: a new signal must be pending, not %', NEW.state
            USING ERRCODE = 'check_violation';
    END IF;
    UPDATE wf_instances SET version = version + 1, updated_at = now()
    WHERE id = NEW.instance_id
    RETURNING status, waiting_token, waits -> waiting_key ->> 'name' INTO st, tok, wname;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'wf_signals: no workflow instance %', NEW.instance_id
            USING ERRCODE = 'SWF01';
    END IF;
    IF st IN ('COMPLETED', 'FAILED', 'CANCELLED') THEN
        RAISE EXCEPTION 'wf_signals: workflow instance % is %; it takes no more signals',
            NEW.instance_id, st USING ERRCODE = 'SWF02';
    END IF;
    -- Wake a waiting instance if the signal may concern its wait: a tokened one (applied
    -- or dropped as stale) or an untokened one of the awaited name (others stay buffered).
    IF tok IS NOT NULL AND (NEW.token IS NOT NULL OR NEW.name = wname) THEN
        UPDATE wf_tasks SET due_at = least(due_at, NEW.due_at)
        WHERE instance_id = NEW.instance_id AND slot = '' AND lease_owner IS NULL;
    END IF;
    PERFORM pg_notify('swf_wake_' || TG_TABLE_SCHEMA, 'signal');
    RETURN NEW;
END
$$;

CREATE TRIGGER wf_signals_arrived BEFORE INSERT ON wf_signals
FOR EACH ROW WHEN (NEW.kind = 'signal') EXECUTE FUNCTION wf_signal_arrived();
