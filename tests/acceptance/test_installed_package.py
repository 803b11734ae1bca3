"""The package as a user gets it: the wheel, installed into a fresh virtual environment.

The sdist and the wheel are built from a copy of the source tree (the checkout is not
written to) and pass ``twine check``; the wheel is installed with its extras
``[postgres,ethereum,arweave,dag]`` (dependencies from the package index, through the pip
cache) into a new ``python -m venv``, and once more with no extras at all. Everything else
runs with that environment's interpreter and console script, from an empty directory
outside the repository, with no ``PYTHONPATH`` and no ``SWF_*`` variable: the README
quickstart, the CLI on a workflow module in that directory, and a PostgreSQL store. Each
run checks that ``statemachine_wf`` was imported from the virtual environment, never from
the checkout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = "postgres,ethereum,arweave,dag"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

# Left out of the copy that is built: not source, or large, or written by tools.
_TOP_LEVEL_SKIPPED = {
    ".git",
    ".venv",
    "node_modules",
    "build",
    "dist",
    "logs",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
}
_SKIPPED_ANYWHERE = re.compile(r"(__pycache__|.*\.egg-info|.*\.db(-wal|-shm)?)$")

FLOWS = '''\
"""A user's workflow module, in a directory of its own."""

from pydantic import BaseModel

import statemachine_wf
from statemachine_wf import COMPLETED, StepContext, Workflow, step


class Number(BaseModel):
    n: int


class Result(BaseModel):
    doubled: int | None = None
    note: str | None = None
    sdk: str | None = None


class Double(Workflow[Number, Result]):
    workflow_type = "accept.double.v1"
    suffix: str  # a dependency, from dependencies()

    @step(initial=True, to="describe")
    def double(self, ctx: StepContext[Number, Result]) -> str:
        ctx.set(doubled=2 * ctx.input.n, sdk=statemachine_wf.__file__)
        return "describe"

    @step(to=COMPLETED)
    def describe(self, ctx: StepContext[Number, Result]) -> None:
        ctx.set(note=f"{ctx.progress.doubled} {self.suffix}")


def dependencies() -> dict[str, object]:
    return {"suffix": "via --deps"}
'''

ON_POSTGRES = """\
import json
import sys

import statemachine_wf
from statemachine_wf import Client, Runner, open_store

from flows import Double, dependencies

store = open_store(sys.argv[1], schema=sys.argv[2])
print("schema at version", store.migrate())
client = Client(store, [Double])
run_id = client.start(Double, {"n": 21}, idempotency_key="pg-21")
assert client.start(Double, {"n": 21}, idempotency_key="pg-21") == run_id
Runner(store, [Double], dependencies=dependencies()).run_until_idle(timeout=60)
record = client.get(run_id)
print(json.dumps({"id": run_id, "status": str(record.status), "progress": record.progress,
                  "sdk": statemachine_wf.__file__}))
store.close()
"""


@dataclass(frozen=True)
class Installed:
    """The built distributions and the virtual environment the wheel went into."""

    sdist: Path
    wheel: Path
    venv: Path
    python: Path
    cli: Path
    site_packages: Path


def user_env(**extra: str) -> dict[str, str]:
    """A user's shell: no PYTHON* variable (no PYTHONPATH), no SWF_*, no active venv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "SWF_")) and k != "VIRTUAL_ENV"
    }
    return {**env, **extra}


def run(
    args: Sequence[str | Path],
    cwd: Path,
    env: dict[str, str] | None = None,
    *,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    """Run a command; fail with its output unless it exits 0."""
    proc = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=user_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"{args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def _not_source(directory: str, names: list[str]) -> set[str]:
    top = Path(directory) == ROOT
    return {n for n in names if (top and n in _TOP_LEVEL_SKIPPED) or _SKIPPED_ANYWHERE.match(n)}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    work = tmp_path_factory.mktemp("installed")
    source = work / "source"
    shutil.copytree(ROOT, source, symlinks=True, ignore=_not_source)
    dist = work / "dist"
    run([sys.executable, "-m", "build", "--outdir", dist, source], cwd=work, timeout=600)
    (sdist,) = dist.glob("statemachine_wf-*.tar.gz")
    (wheel,) = dist.glob("statemachine_wf-*.whl")
    venv = work / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=work)
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "-q", f"{wheel}[{EXTRAS}]"], cwd=work, timeout=600)
    purelib = run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=work
    ).stdout.strip()
    return Installed(
        sdist=sdist,
        wheel=wheel,
        venv=venv,
        python=python,
        cli=venv / "bin" / "statemachine-wf",
        site_packages=Path(purelib),
    )


def test_sdist_and_wheel_pass_twine_check(installed: Installed, tmp_path: Path) -> None:
    out = run(
        [sys.executable, "-m", "twine", "check", "--strict", installed.sdist, installed.wheel],
        cwd=tmp_path,
    ).stdout
    assert out.count("PASSED") == 2, out


def test_the_wheel_ships_the_sql_and_no_generic_top_level_package(installed: Installed) -> None:
    names = zipfile.ZipFile(installed.wheel).namelist()
    top = {n.split("/", 1)[0] for n in names}
    assert top == {"statemachine_wf", "statemachine_wf-0.1.0.dist-info"}, sorted(top)
    sql = sorted(n for n in names if n.endswith(".sql"))
    in_repo = sorted(
        f"statemachine_wf/{p.relative_to(ROOT / 'statemachine_wf').as_posix()}"
        for p in (ROOT / "statemachine_wf" / "sql").glob("*/*.sql")
    )
    assert sql == in_repo
    assert {"statemachine_wf/sql/sqlite", "statemachine_wf/sql/postgres"} <= {
        n.rsplit("/", 1)[0] for n in sql
    }
    assert "statemachine_wf/adapters/arweave/arlocal_server.js" in names
    assert "statemachine_wf/py.typed" in names
    # Installed: nothing generic at the top of site-packages.
    for generic in ("adapters", "reconcilers", "examples", "tests", "bench"):
        assert not (installed.site_packages / generic).exists(), generic


def test_the_adapters_import_under_the_package_from_the_venv(
    installed: Installed, tmp_path: Path
) -> None:
    probe = (
        "import importlib.util, json\n"
        "import statemachine_wf\n"
        "import statemachine_wf.adapters.ethereum, statemachine_wf.adapters.arweave\n"
        "import statemachine_wf.reconcilers.ethereum, statemachine_wf.dag\n"
        "print(json.dumps({'sdk': statemachine_wf.__file__,\n"
        "    'eth': statemachine_wf.adapters.ethereum.__file__,\n"
        "    'adapters': importlib.util.find_spec('adapters') is not None,\n"
        "    'reconcilers': importlib.util.find_spec('reconcilers') is not None}))\n"
    )
    found = json.loads(run([installed.python, "-c", probe], cwd=tmp_path).stdout)
    assert Path(found["sdk"]).is_relative_to(installed.site_packages), found
    assert Path(found["eth"]).is_relative_to(installed.site_packages), found
    assert found["adapters"] is False
    assert found["reconcilers"] is False


def test_the_readme_quickstart_runs_from_an_empty_directory(
    installed: Installed, tmp_path: Path
) -> None:
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"```python\n(.*?)```", readme, re.DOTALL)
    assert match, "the README has no python block"
    script = tmp_path / "quickstart.py"
    script.write_text(match.group(1))
    out = run([installed.python, script], cwd=tmp_path).stdout
    assert "HELLO ADA" in out
    assert "COMPLETED" in out


def test_the_cli_runs_a_workflow_module_in_an_empty_directory(
    installed: Installed, tmp_path: Path
) -> None:
    (tmp_path / "flows.py").write_text(FLOWS)
    cli = installed.cli
    env = user_env()  # no PYTHONPATH: -m and --deps resolve from the current directory

    def swf(*args: str) -> str:
        return run([cli, *args], cwd=tmp_path, env=env).stdout

    assert "schema at version" in swf("-m", "flows", "migrate")
    assert (tmp_path / "statemachine_wf.db").exists()  # the default store, here
    payload = json.dumps({"n": 21})
    run_id = swf("-m", "flows", "start", "accept.double.v1", "--input", payload, "--key", "21")
    run_id = run_id.strip()
    again = swf("-m", "flows", "start", "accept.double.v1", "--input", payload, "--key", "21")
    assert again.strip() == run_id
    assert "PENDING" in swf("status", run_id)
    swf("-m", "flows", "worker", "--until-idle", "--deps", "flows:dependencies")
    assert "COMPLETED" in swf("status", run_id)
    record = json.loads(swf("status", run_id, "--json"))
    assert record["status"] == "COMPLETED"
    assert record["progress"]["doubled"] == 42
    assert record["progress"]["note"] == "42 via --deps"
    # The worker ran the installed package, not a checkout.
    assert Path(record["progress"]["sdk"]).is_relative_to(installed.site_packages)


def test_a_plain_install_without_extras_runs_the_quickstart_and_the_cli(
    installed: Installed, tmp_path: Path
) -> None:
    """``pip install statemachine_wf``, no extras: what the README's quickstart and the
    SQLite CLI need is in the core dependencies (the DAG conditions' simpleeval was once
    only in an extra, and ``import statemachine_wf`` failed)."""
    venv = tmp_path / "plain"
    run([sys.executable, "-m", "venv", venv], cwd=tmp_path)
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "-q", installed.wheel], cwd=tmp_path, timeout=600)
    work = tmp_path / "user"
    work.mkdir()
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"```python\n(.*?)```", readme, re.DOTALL)
    assert match, "the README has no python block"
    (work / "quickstart.py").write_text(match.group(1))
    out = run([python, "quickstart.py"], cwd=work).stdout
    assert "HELLO ADA" in out
    assert "COMPLETED" in out
    (work / "flows.py").write_text(FLOWS)
    cli = venv / "bin" / "statemachine-wf"
    assert "schema at version" in run([cli, "-m", "flows", "migrate"], cwd=work).stdout
    payload = json.dumps({"n": 4})
    run_id = run(
        [cli, "-m", "flows", "start", "accept.double.v1", "--input", payload], cwd=work
    ).stdout.strip()
    run([cli, "-m", "flows", "worker", "--until-idle", "--deps", "flows:dependencies"], cwd=work)
    record = json.loads(run([cli, "status", run_id, "--json"], cwd=work).stdout)
    assert record["status"] == "COMPLETED"
    assert record["progress"]["doubled"] == 8


@pytest.mark.postgres
def test_a_postgres_store_from_the_installed_package(
    installed: Installed, tmp_path: Path, pg_dsn: str, pg_schema: str
) -> None:
    (tmp_path / "flows.py").write_text(FLOWS)
    script = tmp_path / "on_postgres.py"
    script.write_text(ON_POSTGRES)
    out = run([installed.python, script, pg_dsn, pg_schema], cwd=tmp_path).stdout
    assert "schema at version" in out
    result = json.loads(out.splitlines()[-1])
    assert result["status"] == "COMPLETED"
    assert result["progress"]["note"] == "42 via --deps"
    assert Path(result["sdk"]).is_relative_to(installed.site_packages)
    # The console script reads the same schema.
    shown = run(
        [installed.cli, "--db", pg_dsn, "--schema", pg_schema, "status", result["id"]],
        cwd=tmp_path,
    ).stdout
    assert "COMPLETED" in shown


def test_npm_install_leaves_the_committed_lock_as_it_is() -> None:
    """The README's test command runs ``npm install`` first; a clean clone stays clean."""
    repo = Path(__file__).resolve().parents[2]
    committed = subprocess.run(
        ["git", "show", "HEAD:package-lock.json"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert (repo / "package-lock.json").read_text() == committed
