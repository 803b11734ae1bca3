-- DAG workflows (issue 4) on the same log, tasks and CAS as state machines.
-- Saved definitions are immutable: an update is a new version. Each DAG instance also
-- carries the definition it runs in its WORKFLOW_CREATED event, so a running instance
-- keeps its version whatever happens here.
CREATE TABLE wf_dag_definitions (
    name       text NOT NULL,
    version    integer NOT NULL,
    definition jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version)
);

-- Which definition (and version) an instance runs; test runs of unsaved graphs too.
CREATE TABLE wf_dag_runs (
    instance_id uuid PRIMARY KEY REFERENCES wf_instances (id) ON DELETE CASCADE,
    name        text NOT NULL,
    version     integer,
    test        boolean NOT NULL DEFAULT false
);
CREATE INDEX wf_dag_runs_name ON wf_dag_runs (name, version);
