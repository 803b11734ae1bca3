-- DAG workflows (issue 4): see the PostgreSQL migration of the same number.
CREATE TABLE wf_dag_definitions (
    name       TEXT NOT NULL,
    version    INTEGER NOT NULL,
    definition TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (name, version)
);

CREATE TABLE wf_dag_runs (
    instance_id TEXT PRIMARY KEY REFERENCES wf_instances (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    version     INTEGER,
    test        INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX wf_dag_runs_name ON wf_dag_runs (name, version);
