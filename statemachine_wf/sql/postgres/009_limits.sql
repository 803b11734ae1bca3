-- Inbox follow-ups (issue 5): the payload limit on signals sent from SQL (swf_start checks
-- it since migration 006; the limit lives in wf_settings), and indexes for retention.

-- Purging an instance cascades into wf_lock_waiters: without this index every purged
-- instance scanned the table.
CREATE INDEX wf_lock_waiters_instance ON wf_lock_waiters (instance_id);
-- Dead letters are purged by age (`purge --dead-letters`).
CREATE INDEX wf_dead_letters_created ON wf_dead_letters (created_at);

-- Signals: the payload limit, checked before anything is written (SQLSTATE 54000,
-- program_limit_exceeded). Timers are written by runners and carry no payload.
CREATE FUNCTION wf_signal_payload_limit() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    size bigint := octet_length(NEW.payload::text);
    cap  bigint := swf_max_payload_bytes();
BEGIN
    IF size > cap THEN
        RAISE EXCEPTION 'wf_signals: signal % payload is % bytes; the limit is % bytes',
            quote_literal(NEW.name), size, cap
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'the limit is wf_settings.max_payload_bytes';
    END IF;
    RETURN NEW;
END
$$;

-- Named to fire before wf_signals_arrived (triggers fire in name order): nothing is woken
-- for a refused signal.
CREATE TRIGGER wf_signals_a_payload_limit BEFORE INSERT ON wf_signals
FOR EACH ROW WHEN (NEW.kind = 'signal') EXECUTE FUNCTION wf_signal_payload_limit();
