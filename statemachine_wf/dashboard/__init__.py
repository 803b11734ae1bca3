"""The web dashboard (``statemachine-wf dashboard``): instances, DAG runs, dead letters,
workers and throughput over any store, read-only unless given an operator token."""
