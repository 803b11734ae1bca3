-- Inbox follow-ups (issue 5): see the PostgreSQL migration of the same number. SQLite's
-- RAISE takes a constant message, so the refusal names the setting that holds the limit.
CREATE INDEX wf_lock_waiters_instance ON wf_lock_waiters (instance_id);
CREATE INDEX wf_dead_letters_created ON wf_dead_letters (created_at);

-- Signals: the payload's bytes as given (the runner dead-letters text that is not JSON).
CREATE TRIGGER wf_signals_payload_limit BEFORE INSERT ON wf_signals WHEN NEW.kind = 'signal'
BEGIN
    SELECT RAISE(ABORT, 'wf_signals: payload over the limit in wf_settings.max_payload_bytes')
    WHERE length(CAST(NEW.payload AS BLOB))
          > coalesce((SELECT CAST(value AS INTEGER) FROM wf_settings
                      WHERE name = 'max_payload_bytes'), 262144);
END;
