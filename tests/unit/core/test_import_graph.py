"""The package's layers, checked on its real import graph.

grimp (the graph library behind import-linter) reads every import statement of the
package, including those inside functions and under ``TYPE_CHECKING``: a lazy import is
still a dependency, and a cycle through one is still a cycle. docs/architecture.md draws
the same layers.
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterator

import grimp
import pytest

import statemachine_wf

PACKAGE = "statemachine_wf"

# Lowest first. A module may import its own layer and the layers below it, never above.
# The folders are the layers: definition/, core/ (the pure core, then the port), runtime/
# (operations, then the rest), client/.
LAYERS: dict[str, tuple[str, ...]] = {
    # What an author writes and hands over: definitions, errors, limits, settings. errors
    # stays at the top of the package: an error's dotted name is stored in the log.
    "definition": (
        "errors",
        "definition",
        "definition.events",
        "definition.config",
        "definition.redact",
        "definition.limits",
        "definition.ids",
        "definition.retry",
        "definition.workflow",
        "definition.checks",
        "definition.options",
        "definition.dag_definition",
        "definition.dag_loading",
        "definition.dag_models",
        "definition.dag_expressions",
        "definition.dag_templates",
        "definition.wait_tokens",
    ),
    # Pure: no I/O, no clock, no randomness (checked below); `now` is passed in.
    "core": (
        "core.evolve",
        "core.progress",
        "core.fold",
        "core.decide",
        "core.waits",
        "core.audit",
        "core.dag_view",
        "core.dag_interpret",
        "core.dag_vouch",
        "core.dag_group",
    ),
    # The store port: its records and roles (and the core/ package itself, which imports
    # nothing).
    "port": ("core", "core.records", "core.ports", "core.store", "core.workers"),
    # The version-checked operations and the only CAS-retry loop.
    "operations": ("runtime.operations",),
    # Instrumentation (log context, traces, metrics): below everything that it observes.
    "observe": ("runtime.observe",),
    # Driving claimed instances: the pool, one driver per kind, the DAG node handlers.
    "runtime": (
        "runtime",
        "runtime.context",
        "runtime.driver",
        "runtime.runner",
        "runtime.idle",
        "runtime.twins",
        "runtime.handback",
        "runtime.dag_executor",
        "runtime.dag_batch",
        "runtime.dag_cache",
        "runtime.dag_group",
        "runtime.dag_keep",
        "runtime.dag_failures",
        "runtime.dag_handlers",
        "runtime.dag_loops",
    ),
    # What producers and operators call.
    "client": (
        "client",
        "client.machine",
        "client.dag",
        "client.inbox",
        "client.live",
        "client.signers",
    ),
}
STORES = "stores"  # beside the stack: may use definition, core and port only
SURFACE = ("", "dag")  # the facades: the package and the DAG package re-export
SURFACE_PACKAGES = ("cli", "testing", "dashboard")  # the CLI, testing helpers, dashboard
OUTSIDE = ("adapters", "reconcilers")  # installed under the package, checked elsewhere

CORE_MAY_NOT_IMPORT = {"time", "random", "os", "socket", "threading", "uuid", "datetime", "asyncio"}


def _short(module: str) -> str:
    return module[len(PACKAGE) + 1 :] if module != PACKAGE else ""


def _layer(module: str) -> str:
    name = _short(module)
    for layer, members in LAYERS.items():
        if name in members:
            return layer
    if name == STORES or name.startswith(STORES + "."):
        return STORES
    if name in SURFACE or name.split(".")[0] in SURFACE_PACKAGES:
        return "surface"
    if name.split(".")[0] in OUTSIDE:
        return "outside"
    raise AssertionError(f"{module} is in no layer: add it to LAYERS in this test")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(PACKAGE, include_external_packages=False)


def _own(graph: grimp.ImportGraph) -> list[str]:
    return sorted(m for m in graph.modules if _layer(m) != "outside")


def _edges(graph: grimp.ImportGraph) -> Iterator[tuple[str, str]]:
    for module in _own(graph):
        for imported in graph.find_modules_directly_imported_by(module):
            if _layer(imported) != "outside":
                yield module, imported


def test_every_module_has_a_layer(graph: grimp.ImportGraph) -> None:
    for module in graph.modules:
        _layer(module)  # raises for a module nobody placed


def test_no_upward_import(graph: grimp.ImportGraph) -> None:
    order = list(LAYERS)
    allowed_for_stores = {"definition", "core", "port", STORES}
    upward = []
    for module, imported in _edges(graph):
        mine, theirs = _layer(module), _layer(imported)
        if mine == "surface":
            continue  # the top: the facades re-export, the CLI and testing use everything
        if theirs == "surface":
            upward.append(f"{module} -> {imported} (the surface is the top)")
        elif mine == STORES:
            if theirs not in allowed_for_stores:
                upward.append(f"{module} -> {imported} (a store implements the port only)")
        elif theirs == STORES:
            upward.append(f"{module} -> {imported} (only the surface picks a store)")
        elif order.index(theirs) > order.index(mine):
            upward.append(f"{module} ({mine}) -> {imported} ({theirs})")
    assert upward == []


def test_no_import_cycle(graph: grimp.ImportGraph) -> None:
    own = _own(graph)
    edges: dict[str, list[str]] = {m: [] for m in own}
    for module, imported in _edges(graph):
        edges[module].append(imported)
    # Tarjan's strongly connected components; any component of two or more is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in own:
        if module not in index:
            visit(module)
    assert cycles == []


def test_the_core_does_no_io_and_reads_no_clock() -> None:
    root = pathlib.Path(statemachine_wf.__file__).parent
    offenders = []
    for name in LAYERS["core"]:
        path = root.joinpath(*name.split(".")).with_suffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found = {node.module.split(".")[0]}
            else:
                continue
            offenders += [f"{name}: {m}" for m in sorted(found & CORE_MAY_NOT_IMPORT)]
    assert offenders == []


def test_the_checker_sees_a_cycle_and_an_upward_import() -> None:
    """The rules above can fail: a graph with a planted cycle and an upward edge."""
    graph = grimp.build_graph(PACKAGE, include_external_packages=False)
    graph.add_import(importer=f"{PACKAGE}.core.fold", imported=f"{PACKAGE}.runtime.operations")
    with pytest.raises(AssertionError):
        test_no_upward_import(graph)
    with pytest.raises(AssertionError):
        test_no_import_cycle(graph)


def test_config_is_the_only_reader_of_the_environment() -> None:
    """``SWF_*`` settings are read in one place (``Config``); the rest is handed them."""
    root = pathlib.Path(statemachine_wf.__file__).parent
    readers = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] in OUTSIDE or relative == pathlib.Path("definition", "config.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in {"environ", "getenv"}:
                readers.append(f"{relative}:{node.lineno}")
            if (
                isinstance(node, ast.ImportFrom)
                and node.module == "os"
                and any(a.name in {"environ", "getenv"} for a in node.names)
            ):
                readers.append(f"{relative}:{node.lineno}")
    assert readers == []


MAX_MODULE_LINES = 600


def test_no_module_is_over_600_lines() -> None:
    """Small modules: none of the package's, the adapters and reconcilers installed under
    it included, is longer than 600 lines; a longer one is two things to split."""
    import statemachine_wf.adapters
    import statemachine_wf.reconcilers

    packages = (statemachine_wf, statemachine_wf.adapters, statemachine_wf.reconcilers)
    roots: list[pathlib.Path] = []
    for p in packages:
        assert p.__file__ is not None  # a regular package, not a namespace one
        roots.append(pathlib.Path(p.__file__).resolve().parent)
    paths = sorted({path.resolve() for root in roots for path in root.rglob("*.py")})
    assert {r.name for r in roots} <= {p.parent.name for p in paths}  # every tree was read
    longer = [
        f"{path}: {n} lines"
        for path in paths
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert longer == []
