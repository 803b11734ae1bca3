"""A function registered ``inline=True`` runs on the worker's own thread, with no timeout;
any other sync function on the runner's pool, as before. Both stores, the real runner."""

from __future__ import annotations

import pytest

from statemachine_wf import Status, Store
from statemachine_wf.dag import DagBuilder, DagDefinition, Registry
from statemachine_wf.errors import InputError

from . import helpers as h


def two_threads() -> DagDefinition:
    """start -> {an inline function, a pooled one} -> join (all) -> end."""
    b = DagBuilder("inline_threads")
    b.node("s", "start")
    h.py(b, "inline", "thread_of", tag="a")
    h.py(b, "pooled", "thread_of_pooled", tag="b")
    h.py(b, "join", "tag", name="joined")
    b.node("e", "end", outputs={"inline": "{{ctx.inline}}", "pooled": "{{ctx.pooled}}"})
    b.chain("s", "inline", "join", "e")
    b.chain("s", "pooled", "join")
    return b.build()


def test_an_inline_function_runs_on_the_workers_thread(store: Store) -> None:
    client, iid, record = h.run_to_end(store, two_threads())
    assert record.status == Status.COMPLETED
    out = client.output(iid)
    assert out is not None
    assert out["inline"] == {"tag": "a", "thread": out["inline"]["thread"], "node": "inline"}
    assert out["inline"]["thread"].startswith("swf-worker-")
    assert out["pooled"]["thread"].startswith("swf-dag-fn")
    assert client.executions(iid) == {"s": 1, "inline": 1, "pooled": 1, "join": 1, "e": 1}


def test_a_node_timeout_on_an_inline_function_fails_the_node_by_name(store: Store) -> None:
    b = DagBuilder("inline_timeout")
    b.node("s", "start")
    b.node("n", "python", function="thread_of", args={"tag": "x"}, timeout=5)
    b.node("e", "end")
    b.chain("s", "n", "e")
    _, _, record = h.run_to_end(store, b.build())
    assert record.status == Status.FAILED
    assert record.error is not None
    assert record.error["code"] == "bad_config"
    assert "'thread_of' runs inline" in record.error["message"]
    assert "timeout (5" in record.error["message"]


def test_inline_registration_refuses_a_timeout_and_an_async_function() -> None:
    reg = Registry()
    with pytest.raises(InputError, match=r"'both': inline=True .* timeout \(1.0 s\)"):
        reg.add_function("both", lambda: 1, timeout=1.0, inline=True)

    async def later() -> int:
        return 1

    with pytest.raises(InputError, match=r"'later' is async: inline=True is for sync"):
        reg.add_function("later", later, inline=True)
    with pytest.raises(InputError, match=r"'q' is async"):
        reg.query("q", inline=True)(later)
    reg.add_function("fine", lambda: 1, inline=True)
    assert reg.get_function("fine").inline is True
    assert reg.get_function("fine").timeout is None
