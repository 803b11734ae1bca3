-- The dashboard pages instances newest first by (created_at, id) with a keyset cursor
-- (page_instances): this index makes every page one index range, however deep. created_at
-- and id never change, so the index costs one entry per instance and keeps the per-step
-- updates of running instances HOT.
CREATE INDEX wf_instances_recent ON wf_instances (created_at, id);
