"""The ChaosChain workflows in a ``statemachine-wf worker`` process, wired by ``--deps``.

The worker is the CLI as the README runs it: the workflows from
``examples.chaoschain.workflows``, their dependencies from
``examples.chaoschain:dependencies`` reading ``SWF_*`` variables (node URLs, contract,
keys), on a SQLite store with one WorkSubmission started by a producer.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from examples.chaoschain import WorkSubmission
from examples.chaoschain.deps import ENV_VARS
from statemachine_wf import Client, Status

from .conftest import Env, wait_for
from .flows import work_input

REPO = Path(__file__).resolve().parents[3]
WORKER = [
    sys.executable,
    "-m",
    "statemachine_wf.cli",
    "-m",
    "examples.chaoschain.workflows",
    "worker",
    "--deps",
    "examples.chaoschain:dependencies",
]


def worker_env(**values: str) -> dict[str, str]:
    """This process's environment without any ChaosChain variable, plus ``values``."""
    base = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    return {**base, **values}


@pytest.mark.chain
def test_a_cli_worker_runs_a_work_submission_with_deps_from_the_environment(
    chain_env: Env, tmp_path: Path
) -> None:
    env = chain_env
    wallet_file = tmp_path / "arweave-wallet.json"
    env.wallet.save(wallet_file)
    key = env.node.private_keys[0]
    inp = work_input(1, env.signer.address, tag=" (worker with --deps)")
    run_id = Client(env.store, [WorkSubmission]).start(
        WorkSubmission, inp, idempotency_key="deps-work-1"
    )
    variables = worker_env(
        SWF_ETH_RPC_URL=env.node.url,
        SWF_CHAOSCHAIN_ADDRESS=env.contract.address,
        SWF_ETH_PRIVATE_KEY=key,
        SWF_ARWEAVE_URL=env.arlocal.url,
        SWF_ARWEAVE_WALLET=str(wallet_file),
        # anvil mines a block per transaction and no other: nothing would ever be 2 deep.
        SWF_CHAOSCHAIN_CONFIRMATIONS="1",
        SWF_CHAOSCHAIN_POLL_INTERVAL="0.2",
    )
    log = tmp_path / "worker.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [*WORKER[:3], "--db", env.db_url, *WORKER[3:], "--id", "deps-worker"],
            cwd=REPO,
            env=variables,
            stdout=err,
            stderr=subprocess.STDOUT,
        )
    try:

        def done() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"the worker exited:\n{log.read_text()}")
            return env.status(run_id).terminal

        wait_for(done, timeout=90, what="the WorkSubmission to end")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    output = log.read_text()
    assert env.status(run_id) == Status.COMPLETED, (env.events(run_id), output)
    progress = env.progress(run_id)
    assert progress["onchain_confirmed"] is True
    assert progress["arweave_tx_id"]
    submitted = [e for e in env.work_events() if "0x" + e.args.dataHash.hex() == inp["data_hash"]]
    assert len(submitted) == 1
    assert submitted[0].args.evidenceId == f"ar://{progress['arweave_tx_id']}"
    assert key.removeprefix("0x") not in output  # the key never reaches a log line


def test_a_cli_worker_without_the_environment_refuses_to_start(tmp_path: Path) -> None:
    key = "0x" + "a1" * 32
    proc = subprocess.run(
        [*WORKER[:3], "--db", f"sqlite:///{tmp_path / 'swf.db'}", *WORKER[3:], "--until-idle"],
        cwd=REPO,
        env=worker_env(SWF_ETH_PRIVATE_KEY=key),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    for name in ("SWF_ETH_RPC_URL", "SWF_CHAOSCHAIN_ADDRESS", "SWF_ARWEAVE_URL"):
        assert name in proc.stderr
    assert key.removeprefix("0x") not in proc.stdout + proc.stderr
