"""``python -m bench core [--n 1000] [--quick]``, ``python -m bench profile``,
``python -m bench chain [--quick]``, ``python -m bench inbox [--quick]``,
``python -m bench signals``, ``python -m bench dag [--quick]``,
``python -m bench soak [--store sqlite|pg] [--quick]`` (one runner, N workflows: is memory
flat?), ``python -m bench claimscale`` (a claim's cost against the due backlog),
``python -m bench statements [--e2e]`` (statements per workflow, server CPU each),
``python -m bench replay`` (the store's PostgreSQL statements on one backend, server CPU
a call beside the raw write's),
``python -m bench burst`` (PostgreSQL: a backlog arriving after the runner's plans were
made), ``python -m bench wave`` (waves of workflows started at once at an idle runner),
``python -m bench dagstart`` (what a DAG start costs the producer),
``python -m bench loop`` (a DAG loop's iteration as the loop grows),
``python -m bench instructions`` (instructions a loop iteration and a step, under valgrind),
``python -m bench writers`` (SQLite: processes queued on the file lock or not) and
``python -m bench authoring [FILE ...]`` (lines of workflow code)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    sub = parser.add_subparsers(dest="cmd", required=True)

    core = sub.add_parser("core", help="N workflows x 3 no-op steps, every configuration")
    core.add_argument("--n", type=int, default=1000, help="workflows per configuration")
    core.add_argument("--quick", action="store_true", help="smoke run: N=200, 30 latencies")
    core.add_argument("--procs", type=int, default=4, help="processes of the 'Np' rows")
    core.add_argument("--pg-concurrency", type=int, default=8, help="runner threads/process")
    core.add_argument("--sqlite-concurrency", type=int, default=8, help="runner threads/proc")
    core.add_argument("--latency-samples", type=int, default=200)
    core.add_argument("--only", default="", help="comma-separated configuration names")
    core.add_argument("--list", action="store_true", help="list configuration names")
    core.add_argument("--json", default="", help="also write the results here")
    core.add_argument("--dsn", default="", help="PostgreSQL DSN (default $SWF_TEST_PG_DSN)")
    core.add_argument(
        "--metrics", action="store_true", help="runners count into the worker's metrics"
    )
    core.add_argument(
        "--count",
        action="store_true",
        help="count each runner's statements (server CPU each), empty claims and sleeps",
    )
    core.add_argument(
        "--runner-connections",
        type=int,
        default=0,
        help="the PostgreSQL runners' runner_connections (default: the library's)",
    )
    core.add_argument(
        "--dashboard",
        action="store_true",
        help="a dashboard process open on the store, polled every second, during the run",
    )

    prof = sub.add_parser("profile", help="cProfile one single-process runner run")
    prof.add_argument("--store", choices=("pg", "sqlite"), default="pg")
    prof.add_argument("--n", type=int, default=1000)
    prof.add_argument("--concurrency", type=int, default=0, help="default: 8")
    prof.add_argument("--top", type=int, default=30)
    prof.add_argument("--sort", default="tottime", choices=("tottime", "cumulative", "ncalls"))
    prof.add_argument("--dsn", default="")
    prof.add_argument("--no-profile", action="store_true", help="time only (for py-spy)")
    prof.add_argument(
        "--cpu", action="store_true", help="profile each thread's CPU time, not wall time"
    )
    prof.add_argument(
        "--dag", choices=("fanout", "chain"), default=None, help="profile N DAG instances instead"
    )

    chain = sub.add_parser(
        "chain",
        help="WorkSubmissions on anvil + arlocal: per-signer "
        "throughput, submit->confirmed latency, start-up reconciliation",
    )
    chain.add_argument(
        "--quick", action="store_true", help="smoke run: 5 / 3 workflows per signer, 200 in flight"
    )
    chain.add_argument("--signers", default="", help="signer counts (default 1,4,16)")
    chain.add_argument("--per-signer-auto", type=int, default=0, help="automine (default 30)")
    chain.add_argument("--per-signer-block", type=int, default=0, help="block time (default 10)")
    chain.add_argument("--block-time", type=float, default=1.0)
    chain.add_argument("--recon", type=int, default=0, help="in-flight instances (default 1000)")
    chain.add_argument("--confirmations", type=int, default=1)
    chain.add_argument("--poll", type=float, default=0.2, help="AWAIT_TX_CONFIRM poll, s")
    chain.add_argument("--concurrency", type=int, default=8, help="runner threads")
    chain.add_argument(
        "--procs", type=int, default=1, help="runner processes (>1: CLI workers, --deps)"
    )
    chain.add_argument(
        "--preload",
        action="store_true",
        help="block time: no block until every upload is done (the queue's pace alone)",
    )
    chain.add_argument(
        "--store",
        choices=("sqlite", "pg"),
        default="sqlite",
        help="the throughput rows' store (pg: a fresh schema at SWF_TEST_PG_DSN)",
    )
    chain.add_argument("--only", default="", help="comma-separated: automine,block,recon")
    chain.add_argument("--json", default="", help="also write the results here")

    inbox = sub.add_parser(
        "inbox", help="enqueue single/batched vs raw SQL and Procrastinate; claim on a big table"
    )
    inbox.add_argument("--quick", action="store_true", help="smoke run: small counts")
    inbox.add_argument("--only", default="", help="comma-separated case names")
    inbox.add_argument("--dsn", default="", help="PostgreSQL DSN (default $SWF_TEST_PG_DSN)")
    inbox.add_argument(
        "--ids",
        choices=("v7", "v4"),
        default="v7",
        help="instance ids of the claim cases' rows: v7 as the library makes them, v4 random",
    )
    inbox.add_argument(
        "--finished",
        type=int,
        default=0,
        help="claim-loaded: finished instances, two events each (default 1,000,000)",
    )
    inbox.add_argument(
        "--pending", type=int, default=0, help="claim-loaded: pending instances (default 100,000)"
    )

    sig = sub.add_parser("signals", help="timer lateness p50/p99 with an idle runner")
    sig.add_argument("--n", type=int, default=200, help="timers per store")
    sig.add_argument("--spacing", type=float, default=0.02, help="seconds between due times")
    sig.add_argument("--only", default="", help="comma-separated: pg,sqlite")
    sig.add_argument("--dsn", default="", help="PostgreSQL DSN (default $SWF_TEST_PG_DSN)")

    dag = sub.add_parser(
        "dag", help="DAG nodes/s (fan-out 1->100->1, chain of 100) beside the step rate"
    )
    dag.add_argument("--quick", action="store_true", help="smoke run: 4 instances, N=200")
    dag.add_argument("--instances", type=int, default=0, help="per shape (default 10)")
    dag.add_argument("--stores", default="sqlite,pg", help="comma-separated: sqlite,pg")
    dag.add_argument("--procs", default="1,4", help="runner process counts")
    dag.add_argument("--dsn", default="", help="PostgreSQL DSN (default $SWF_TEST_PG_DSN)")
    dag.add_argument("--sqlite-concurrency", type=int, default=4, help="runner threads/proc")
    dag.add_argument(
        "--count",
        action="store_true",
        help="count each runner's statements (server CPU each), empty claims and sleeps",
    )
    dag.add_argument(
        "--pooled",
        action="store_true",
        help="node function on the runner's pool (30 s timeout), not inline=True",
    )
    dag.add_argument(
        "--dag-connections",
        type=int,
        default=0,
        help="connections a DAG runner's node commits may add to its pool (default 0)",
    )
    dag.add_argument(
        "--runner-connections",
        type=int,
        default=0,
        help="the PostgreSQL runners' runner_connections (default: the library's)",
    )
    dag.add_argument(
        "--shapes",
        default="fanout,chain",
        help="comma-separated: fanout,chain,slowfan (one fan-out of 64 nodes of 0.2 s)",
    )
    dag.add_argument(
        "--dag-sticky",
        type=float,
        default=None,
        help="seconds a DAG task a PostgreSQL runner dispatches stays its own "
        "(default: the library's, 1)",
    )

    authoring = sub.add_parser(
        "authoring", help="lines of workflow code per workflow class (imports, docstrings out)"
    )
    authoring.add_argument("files", nargs="*", help="default: examples/chaoschain/workflows.py")

    paging = sub.add_parser("paging", help="the dashboard's instance pages over a big table")
    paging.add_argument("--rows", type=int, default=1_000_000)
    paging.add_argument("--repeat", type=int, default=21)
    paging.add_argument("--stores", default="pg,sqlite")

    scale = sub.add_parser(
        "claimscale", help="claims/s, next_due and the heartbeat against the due backlog"
    )
    scale.add_argument("--backlogs", default="100,10000,100000")
    scale.add_argument("--stores", default="sqlite,pg")
    scale.add_argument("--claims", type=int, default=300)
    burst = sub.add_parser(
        "burst", help="PostgreSQL: a backlog arriving after the runner's plans were made"
    )
    burst.add_argument("--backlog", type=int, default=50_000)
    burst.add_argument("--warm", type=int, default=200, help="workflows before the burst")
    burst.add_argument("--sample", type=int, default=1000, help="burst workflows timed")
    burst.add_argument("--dsn", default="", help="PostgreSQL DSN (default $SWF_TEST_PG_DSN)")
    loop = sub.add_parser("loop", help="ms a DAG loop iteration, against the loop's length")
    loop.add_argument("--stores", default="sqlite,pg")
    loop.add_argument("--iterations", default="250,1000,4000", help="loop lengths")
    loop.add_argument("--dsn", default="", help="PostgreSQL DSN (default $SWF_TEST_PG_DSN)")
    instr = sub.add_parser(
        "instructions", help="instructions a DAG loop iteration and a step (valgrind)"
    )
    instr.add_argument("--workloads", default="loop,steps", help="loop, steps")
    instr.add_argument("--stores", default="sqlite,pg")
    instr.add_argument("--repeat", type=int, default=2, help="runs of each (their spread)")
    instr.add_argument("--dsn", default="", help="PostgreSQL DSN (default $SWF_TEST_PG_DSN)")
    dagstart = sub.add_parser("dagstart", help="ms a DAG start, beside a state machine's")
    dagstart.add_argument("--stores", default="pg,sqlite")
    dagstart.add_argument("--n", type=int, default=300, help="starts of each kind")
    dagstart.add_argument("--dsn", default="", help="PostgreSQL DSN (default $SWF_TEST_PG_DSN)")

    wave = sub.add_parser("wave", help="waves of workflows started at once at an idle runner")
    wave.add_argument("--stores", default="pg,sqlite")
    wave.add_argument("--waves", type=int, default=100)
    wave.add_argument("--size", type=int, default=8, help="workflows a wave (start_many)")
    wave.add_argument("--count", action="store_true", help="claim statements a workflow")
    wave.add_argument("--dsn", default="", help="PostgreSQL DSN (default $SWF_TEST_PG_DSN)")
    stmts = sub.add_parser(
        "statements", help="statements per workflow and server CPU per statement"
    )
    stmts.add_argument("--stores", default="pg,sqlite")
    stmts.add_argument("--n", type=int, default=2000)
    stmts.add_argument("--concurrency", type=int, default=8)
    stmts.add_argument("--e2e", action="store_true", help="started while the runner works")
    stmts.add_argument(
        "--dag", choices=("fanout", "chain"), default="", help="N DAG instances, per node"
    )
    replay = sub.add_parser(
        "replay", help="PostgreSQL: the store's statements on one backend, server CPU a call"
    )
    replay.add_argument("--n", type=int, default=3000, help="calls a statement a round")
    replay.add_argument("--rounds", type=int, default=3)
    replay.add_argument("--dsn", default="", help="PostgreSQL DSN (default $SWF_TEST_PG_DSN)")
    soak = sub.add_parser(
        "soak", help="N workflows through one runner process: RSS and throughput over time"
    )
    soak.add_argument("--store", choices=("sqlite", "pg"), default="sqlite")
    soak.add_argument("--n", type=int, default=0, help="workflows (default 100000)")
    soak.add_argument("--quick", action="store_true", help="smoke run: N=10000")
    soak.add_argument("--batch", type=int, default=500, help="instances per start_many")
    soak.add_argument("--backlog", type=int, default=5000, help="most started, not finished")
    soak.add_argument("--concurrency", type=int, default=0, help="default: 8 pg, 4 sqlite")
    soak.add_argument("--sample", type=float, default=2.0, help="seconds between samples")
    soak.add_argument("--json", default="", help="also write the samples and summary here")
    soak.add_argument("--dsn", default="", help="PostgreSQL DSN (default $SWF_TEST_PG_DSN)")

    writers = sub.add_parser(
        "writers", help="SQLite: processes writing one file, queued on the file lock or not"
    )
    writers.add_argument("--procs", type=int, default=4)
    writers.add_argument("--threads", type=int, default=4, help="per process")
    writers.add_argument("--n", type=int, default=250, help="creates per thread")
    writers.add_argument("--think", type=float, default=0.002, help="s between a thread's")
    writers.add_argument("--rounds", type=int, default=3)

    args = parser.parse_args(argv)
    if args.cmd == "writers":
        from . import writers as wr

        return wr.main(wr.Settings(args.procs, args.threads, args.n, args.think, args.rounds))
    if args.cmd == "claimscale":
        from . import claimscale as cs

        backlogs = [int(x) for x in args.backlogs.split(",") if x.strip()]
        stores = [x.strip() for x in args.stores.split(",") if x.strip()]
        print(cs.table(cs.run(stores, backlogs, args.claims)))
        return 0
    if args.cmd == "burst":
        from . import burst as bu

        print(bu.run(args.backlog, args.warm, args.sample, args.dsn))
        return 0
    if args.cmd == "loop":
        from . import loop as lp

        sizes = [int(x) for x in args.iterations.split(",") if x.strip()]
        for kind in (x.strip() for x in args.stores.split(",") if x.strip()):
            print(lp.run(kind, sizes, args.dsn))
        return 0
    if args.cmd == "instructions":
        from . import instructions as ins

        split = lambda text: [x.strip() for x in text.split(",") if x.strip()]  # noqa: E731
        print(ins.run(split(args.workloads), split(args.stores), args.repeat, args.dsn))
        return 0
    if args.cmd == "dagstart":
        from . import dagstart as ds_

        for kind in (x.strip() for x in args.stores.split(",") if x.strip()):
            print(ds_.run(kind, args.n, args.dsn))
        return 0
    if args.cmd == "wave":
        from . import wave as wv

        for kind in [x.strip() for x in args.stores.split(",") if x.strip()]:
            print(wv.run(kind, args.waves, args.size, args.count, args.dsn))
        return 0
    if args.cmd == "statements":
        from . import statements as st

        for kind in [x.strip() for x in args.stores.split(",") if x.strip()]:
            print(st.run(kind, args.n, e2e=args.e2e, concurrency=args.concurrency, dag=args.dag))
        return 0
    if args.cmd == "replay":
        from . import replay as rp

        print(rp.main(args.n, args.rounds, args.dsn))
        return 0
    if args.cmd == "soak":
        from . import soak as sk

        ks = sk.Settings.quick() if args.quick else sk.Settings()
        ks.store = args.store
        ks.n = args.n or ks.n
        ks.batch = args.batch
        ks.backlog = args.backlog
        ks.concurrency = args.concurrency
        ks.sample = args.sample
        if args.dsn:
            ks.dsn = args.dsn

        def log_soak(msg: str) -> None:
            print(msg, file=sys.stderr, flush=True)

        record = sk.run(ks, log_soak)
        print(sk.table(record))
        if args.json:
            sk.dump_json(record, args.json)
        return 0 if set(record["statuses"]) == {"COMPLETED"} else 1
    if args.cmd == "paging":
        from . import paging as pg

        return pg.main(args.rows, args.repeat, args.stores.split(","))
    if args.cmd == "authoring":
        from . import authoring as au

        return au.main(args.files)
    if args.cmd == "inbox":
        from . import inbox as ib

        settings = ib.Settings.quick() if args.quick else ib.Settings()
        if args.dsn:
            settings.dsn = args.dsn
        settings.ids = args.ids
        settings.finished = args.finished or settings.finished
        settings.pending = args.pending or settings.pending
        wanted = [x.strip() for x in args.only.split(",") if x.strip()] or None

        def log_inbox(msg: str) -> None:
            print(msg, file=sys.stderr, flush=True)

        inbox_rows = ib.run(settings, wanted, log_inbox)
        print(ib.table(inbox_rows))
        return 1 if any(r.system == "error" for r in inbox_rows) else 0
    if args.cmd == "signals":
        from . import signals as sg

        ss = sg.Settings(n=args.n, spacing=args.spacing)
        if args.dsn:
            ss.dsn = args.dsn
        return sg.main(ss, [x.strip() for x in args.only.split(",") if x.strip()] or None)
    if args.cmd == "dag":
        from . import dag as dg

        ds = dg.Settings.quick() if args.quick else dg.Settings()
        ds.instances = args.instances or ds.instances
        ds.stores = tuple(x.strip() for x in args.stores.split(",") if x.strip())
        ds.procs = tuple(int(x) for x in args.procs.split(",") if x.strip())
        ds.shapes = tuple(x.strip() for x in args.shapes.split(",") if x.strip())
        unknown = set(ds.shapes) - set(dg.ALL_SHAPES)
        if unknown:
            parser.error(f"--shapes: unknown {', '.join(sorted(unknown))}")
        if args.dsn:
            ds.dsn = args.dsn
        ds.count = args.count
        ds.pooled = args.pooled
        ds.dag_connections = args.dag_connections
        ds.runner_connections = args.runner_connections
        ds.dag_sticky = args.dag_sticky
        ds.sqlite_concurrency = args.sqlite_concurrency

        def log_dag(msg: str) -> None:
            print(msg, file=sys.stderr, flush=True)

        dag_rows = dg.run(ds, log_dag)
        print(dg.table(dag_rows, ds))
        if args.count:
            print(dg.counts_report(dag_rows))
        return 1 if any(r.error for r in dag_rows) else 0
    if args.cmd == "chain":
        from . import chain as ch

        cs = ch.ChainSettings.quick() if args.quick else ch.ChainSettings()
        if args.signers:
            cs.signers = tuple(int(x) for x in args.signers.split(",") if x.strip())
        cs.per_signer_auto = args.per_signer_auto or cs.per_signer_auto
        cs.per_signer_block = args.per_signer_block or cs.per_signer_block
        cs.recon = args.recon or cs.recon
        cs.block_time = args.block_time
        cs.confirmations = args.confirmations
        cs.poll = args.poll
        cs.concurrency = args.concurrency
        cs.procs = args.procs
        cs.preload = args.preload
        cs.store = args.store
        parts = [x.strip() for x in args.only.split(",") if x.strip()] or None

        def log_chain(msg: str) -> None:
            print(msg, file=sys.stderr, flush=True)

        rows = ch.run(cs, parts, log_chain)
        print(ch.table(rows, cs))
        if args.json:
            ch.dump_json(rows, args.json)
        return 1 if any(r.error for r in rows) else 0
    if args.cmd == "core":
        from . import core as c

        if args.list:
            print("\n".join(c.CONFIGS))
            return 0
        s = c.Settings(
            n=200 if args.quick and args.n == 1000 else args.n,
            procs=args.procs,
            pg_concurrency=args.pg_concurrency,
            sqlite_concurrency=args.sqlite_concurrency,
            latency_samples=30 if args.quick else args.latency_samples,
            metrics=args.metrics,
            dashboard=args.dashboard,
            count=args.count,
            runner_connections=args.runner_connections,
        )
        if args.dsn:
            s.dsn = args.dsn
        only = [x.strip() for x in args.only.split(",") if x.strip()] or None

        def log(msg: str) -> None:
            print(msg, file=sys.stderr, flush=True)

        results = c.run(s, only, log)
        print(c.table(results, s))
        if args.count:
            print(c.counts_report(results))
        if args.json:
            c.dump_json(results, args.json)
        return 1 if any(r.error for r in results) else 0

    from . import profile as p

    return p.main(args)


if __name__ == "__main__":
    raise SystemExit(main())
