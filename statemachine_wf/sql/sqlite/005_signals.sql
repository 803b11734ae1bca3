-- Signals and timers (issue 5); see sql/postgres/005_signals.sql for the design. Times are
-- unix seconds (REAL); the defaults let a plain INSERT from any client use "now".
ALTER TABLE wf_instances ADD COLUMN waits TEXT NOT NULL DEFAULT '{}';
ALTER TABLE wf_instances ADD COLUMN waiting_key TEXT;

-- The producer contract (any language): one INSERT, e.g.
--   INSERT INTO wf_signals (instance_id, name, payload, token)
--   VALUES ('<instance id>', 'approved', '{"by": "ann"}', NULL);
CREATE TABLE wf_signals (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL REFERENCES wf_instances (id) ON DELETE CASCADE,
    kind        TEXT NOT NULL DEFAULT 'signal' CHECK (kind IN ('signal', 'timer')),
    name        TEXT NOT NULL,
    payload     TEXT NOT NULL DEFAULT 'null',
    token       TEXT,
    due_at      REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    state       TEXT NOT NULL DEFAULT 'pending'
                CHECK (state IN ('pending', 'applied', 'stale', 'dead', 'void')),
    created_at  REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    settled_at  REAL
);
CREATE INDEX wf_signals_pending ON wf_signals (instance_id, due_at) WHERE state = 'pending';
CREATE INDEX wf_signals_instance ON wf_signals (instance_id, id);
CREATE INDEX wf_signals_state ON wf_signals (state);

CREATE TRIGGER wf_signals_check BEFORE INSERT ON wf_signals WHEN NEW.kind = 'signal'
BEGIN
    SELECT RAISE(ABORT, 'wf_signals: a new signal must be pending')
    WHERE NEW.state <> 'pending';
    SELECT RAISE(ABORT, 'wf_signals: no such workflow instance')
    WHERE NOT EXISTS (SELECT 1 FROM wf_instances WHERE id = NEW.instance_id);
    SELECT RAISE(ABORT, 'wf_signals: the workflow instance has ended')
    WHERE EXISTS (SELECT 1 FROM wf_instances WHERE id = NEW.instance_id
                  AND status IN ('COMPLETED', 'FAILED', 'CANCELLED'));
END;

CREATE TRIGGER wf_signals_arrived AFTER INSERT ON wf_signals WHEN NEW.kind = 'signal'
BEGIN
    UPDATE wf_instances SET version = version + 1 WHERE id = NEW.instance_id;
    UPDATE wf_tasks SET due_at = min(due_at, NEW.due_at)
    WHERE instance_id = NEW.instance_id AND slot = '' AND lease_owner IS NULL
      AND EXISTS (SELECT 1 FROM wf_instances i
                  WHERE i.id = NEW.instance_id AND i.waiting_token IS NOT NULL
                    AND (NEW.token IS NOT NULL
                         OR json_extract(i.waits, '$."' || i.waiting_key || '".name') = NEW.name));
END;
