-- Sub-workflows (issue 4): see the PostgreSQL migration of the same number.
ALTER TABLE wf_instances ADD COLUMN parent_node TEXT;
CREATE INDEX wf_instances_parent ON wf_instances (parent_id) WHERE parent_id IS NOT NULL;
