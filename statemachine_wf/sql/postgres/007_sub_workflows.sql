-- Sub-workflows (issue 4): a DAG node that runs a state machine as its child.
-- parent_node names the parent's node task waiting for this child: when the child
-- finishes, the same commit makes that task due (no polling). The index finds a
-- parent's children (cancelling a DAG cancels them).
ALTER TABLE wf_instances ADD COLUMN parent_node text;
CREATE INDEX wf_instances_parent ON wf_instances (parent_id) WHERE parent_id IS NOT NULL;
