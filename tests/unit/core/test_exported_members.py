"""The public API is what __init__ says, no more, no less."""

import statemachine_wf


def test_all_is_sorted_and_complete() -> None:
    exported = statemachine_wf.__all__
    assert exported == sorted(exported)
    public = {name for name in dir(statemachine_wf) if not name.startswith("_")}
    modules = {
        "client",
        "config",
        "context",
        "decide",
        "errors",
        "events",
        "fold",
        "limits",
        "live",
        "progress",
        "retry",
        "runner",
        "store",
        "stores",
        "workflow",
        "cli",
        "dag",
        "testing",
        "waits",
        "audit",
        "inbox",
    }
    assert public - modules == set(exported)


def test_layout_core_imports_no_adapter() -> None:
    import pathlib
    import re

    root = pathlib.Path(statemachine_wf.__file__).parent
    offenders = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if re.search(r"^\s*(from|import)\s+(adapters|reconcilers)\b", p.read_text(), re.M)
    ]
    assert offenders == []
