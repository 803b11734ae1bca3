"""The public API is what __init__ says, no more, no less."""

import statemachine_wf


def test_all_is_sorted_and_complete() -> None:
    exported = statemachine_wf.__all__
    assert exported == sorted(exported)
    public = {name for name in dir(statemachine_wf) if not name.startswith("_")}
    modules = {
        "definition",  # the layers' folders
        "core",
        "runtime",
        "client",
        "errors",  # stays at the top: an error's dotted name is stored in the log
        "stores",
        "cli",
        "dag",
        "dashboard",
        "testing",
        "adapters",  # subpackages, imported by their own path
        "reconcilers",
    }
    assert public - modules == set(exported)


def test_layout_core_imports_no_adapter() -> None:
    import pathlib
    import re

    root = pathlib.Path(statemachine_wf.__file__).parent
    outside = {"adapters", "reconcilers"}  # links to the repository's top-level folders
    pattern = r"^\s*(from|import)\s+(statemachine_wf\.|\.+)?(adapters|reconcilers)\b"
    offenders = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if p.relative_to(root).parts[0] not in outside and re.search(pattern, p.read_text(), re.M)
    ]
    assert offenders == []


def test_no_generic_top_level_import_names() -> None:
    """Adapters and reconcilers are imported under this project's namespace only."""
    import pathlib
    import re

    repo = pathlib.Path(statemachine_wf.__file__).resolve().parent.parent
    pattern = r"^\s*(from|import)\s+(adapters|reconcilers)\b"
    offenders = [
        str(p.relative_to(repo))
        for folder in ("statemachine_wf", "adapters", "reconcilers", "examples", "tests", "bench")
        for p in (repo / folder).rglob("*.py")
        if re.search(pattern, p.read_text(), re.M)
    ]
    assert offenders == []


def test_layout_adapters_import_no_reconciler() -> None:
    """Reconcilers read the outside world through adapters; never the reverse (issue 10).

    A transaction's fate belongs to the Ethereum adapter (``adapters/ethereum/fate.py``);
    ``reconcilers.ethereum`` re-exports it.
    """
    import pathlib
    import re

    adapters = pathlib.Path(statemachine_wf.__file__).resolve().parent.parent / "adapters"
    pattern = r"^\s*(from|import)\s+(statemachine_wf\.|\.\.+)reconcilers\b"
    offenders = [str(p) for p in adapters.rglob("*.py") if re.search(pattern, p.read_text(), re.M)]
    assert offenders == []
