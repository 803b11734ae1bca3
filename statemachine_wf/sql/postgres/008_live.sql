-- Live updates (statemachine_wf.live). A watcher registers the instance it watches in
-- wf_live_watches; every statement that appends events to a watched instance then sends
-- one pg_notify per instance on the channel 'swf_live_<schema>' (an md5 of the schema
-- when that would pass Postgres's 63-byte identifier limit), payload
-- '<instance id> <highest seq appended>'. Unwatched instances send nothing: a NOTIFY
-- serialises commits (a database-wide lock held through the commit's WAL flush), which
-- measured 2.5x fewer steps/s when every step notified. A statement-level trigger, so a
-- decision appending five events sends one notification and every writer (runner,
-- client, CLI, a future one) is covered. Subscribers re-read the log after their last
-- seq, so a lost or merged notification loses nothing.
CREATE TABLE wf_live_watches (
    token       uuid PRIMARY KEY,
    instance_id uuid NOT NULL REFERENCES wf_instances (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX wf_live_watches_instance ON wf_live_watches (instance_id);

CREATE FUNCTION wf_events_live() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- One statement (no loop, no variables): the cheapest form measured, ~15-30 us of
    -- server CPU per event-appending statement when nothing is watched.
    PERFORM pg_notify(
        CASE WHEN length(TG_TABLE_SCHEMA) > 54 THEN 'swf_live_' || md5(TG_TABLE_SCHEMA)
             ELSE 'swf_live_' || TG_TABLE_SCHEMA END,
        n.instance_id::text || ' ' || max(n.seq)::text)
    FROM new_events n
    WHERE EXISTS (SELECT 1 FROM wf_live_watches w WHERE w.instance_id = n.instance_id)
    GROUP BY n.instance_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER wf_events_live
    AFTER INSERT ON wf_events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION wf_events_live();
