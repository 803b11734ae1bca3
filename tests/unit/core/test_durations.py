"""Durations are refused where they are made unless finite and bounded (both stores can
store every value that gets through)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from statemachine_wf import RetryPolicy, Snooze, Stall
from statemachine_wf.errors import MAX_DURATION, Waiting, check_duration

BAD = [math.nan, math.inf, -math.inf, -1.0, 1e300, MAX_DURATION * 2]


@pytest.mark.parametrize("value", BAD)
def test_every_producer_refuses_a_bad_duration(value: float) -> None:
    with pytest.raises(ValueError, match="seconds must be a finite number"):
        Snooze(value)
    with pytest.raises(ValueError, match="retry_in must be a finite number"):
        Stall("later", retry_in=value)
    with pytest.raises(ValueError, match="recheck must be a finite number"):
        Waiting("k", "holder", recheck=value)
    for field in ("initial_delay", "max_delay", "stall_retry_after"):
        with pytest.raises(ValueError, match=f"{field} must be a finite number"):
            RetryPolicy(**{field: value})  # type: ignore[arg-type]


def test_good_durations_pass() -> None:
    assert Snooze(0).recheck == 0.0
    assert Stall("x", retry_in=MAX_DURATION).retry_in == MAX_DURATION
    assert check_duration("d", 1) == 1.0
    with pytest.raises(ValueError, match="multiplier must be finite"):
        RetryPolicy(multiplier=math.inf)
    with pytest.raises(ValueError, match="d must be a number of seconds"):
        check_duration("d", "soon")  # type: ignore[arg-type]


def test_sleep_and_wait_refuse_bad_durations() -> None:
    from pydantic import BaseModel

    from statemachine_wf.runtime.context import StepContext

    class M(BaseModel):
        pass

    ctx: StepContext[M, M] = StepContext(
        instance_id="i", workflow_type="t.v1", step="s", attempt=1, input=M(), progress={},
        progress_model=M, host=None, signals=["go"],  # type: ignore[arg-type]
    )  # fmt: skip
    for value in BAD:
        with pytest.raises(ValueError, match="seconds must be a finite number"):
            ctx.sleep(value)
        with pytest.raises(ValueError, match="timeout must be a finite number"):
            ctx.wait_for("go", timeout=value)
    with pytest.raises(ValueError, match="sleep_until's time from now"):
        ctx.sleep_until(datetime(9999, 1, 1, tzinfo=UTC))
