"""A ``python`` node's timeout is the node's deadline, not any TimeoutError.

A registered function that raises TimeoutError of its own (a socket's, say) must surface
that error, so the node's error handling sees what really happened; only the node's own
deadline running out is reported as "did not finish within N s".
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from types import SimpleNamespace
from typing import Any

import pytest

from statemachine_wf.runtime.dag_handlers import Registry, _invoke


def _call(pool: concurrent.futures.Executor) -> Any:
    return SimpleNamespace(
        instance_id="i", node=SimpleNamespace(id="n"), run=1, attempt=1,
        cancelled=lambda: False, pool=pool,
    )  # fmt: skip


def _run(reg: Registry, name: str, timeout: float) -> Any:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return asyncio.run(_invoke(_call(pool), reg.get_function(name), {}, timeout))


def test_a_functions_own_timeout_error_is_not_the_nodes() -> None:
    reg = Registry()

    @reg.function("socket_async")
    async def socket_async() -> None:
        raise TimeoutError("read timed out")

    @reg.function("socket_sync")
    def socket_sync() -> None:
        raise TimeoutError("read timed out")

    for name in ("socket_async", "socket_sync"):
        with pytest.raises(TimeoutError, match=r"^read timed out$"):
            _run(reg, name, 5.0)


def test_the_nodes_deadline_is_reported_as_such() -> None:
    reg = Registry()

    @reg.function("slow_async")
    async def slow_async() -> None:
        await asyncio.sleep(5)

    @reg.function("slow_sync")
    def slow_sync() -> None:
        time.sleep(0.5)

    for name in ("slow_async", "slow_sync"):
        with pytest.raises(TimeoutError, match=f"^{name} did not finish within 0.05 s$"):
            _run(reg, name, 0.05)


def test_a_result_within_the_deadline_is_returned() -> None:
    reg = Registry()

    @reg.function("quick")
    def quick() -> int:
        return 7

    assert _run(reg, "quick", 5.0) == 7
