-- Runners asleep in other processes, so that a start can lease its task to one of them.
--
-- A start whose process has no worker of its type asleep (stores/_decisions.py, _start)
-- looks here for a runner of that type with a worker asleep, and leases its task to that
-- runner in its own commit, its first step started, as a start kept in its process does
-- (create_leased). It then notifies that runner's process alone on `channel`, with the
-- instance's id: the runner reads the task and runs it, with no claim of its own
-- (docs/architecture.md, "A start leased to a runner of another process").
--
-- One row a runner (its incarnation, one per Runner object), written by its process:
-- `sleeping`, how many of its workers sleep, is a hint the process keeps up to date a
-- few milliseconds behind, and each start that leases a task to it counts one off. A
-- row is trusted only while its process lives: the process holds the session advisory
-- lock `lock_key` on the connection that LISTENs on `channel`, and a start passes over
-- a row whose lock it can take (pg_try_advisory_xact_lock_shared: shared, so starts never
-- block each other on it). A killed process's connection closes, its lock goes with it,
-- and no start leases a task to its rows from then on; the next process to register
-- deletes them.
CREATE TABLE wf_idle_runners (
    incarnation text PRIMARY KEY,
    worker      text NOT NULL,
    lease       float8 NOT NULL,
    types       text[] NOT NULL,
    channel     text NOT NULL,
    lock_key    bigint NOT NULL,
    sleeping    integer NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
-- The start's pick walks this index down from the most workers asleep (the store's
-- connections price sequential scans out, and a plan priced that high was compiled by
-- JIT at every call: 250 ms a start).
CREATE INDEX wf_idle_runners_sleeping ON wf_idle_runners (sleeping);
