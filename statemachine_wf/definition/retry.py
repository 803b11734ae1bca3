"""Retry policy: how long to wait after the n-th failure, and what to do when it runs out.

The waits are tenacity's exponential-with-jitter strategy, so the curve is the well-known
one rather than a hand-rolled copy: 1 s, 2 s, 4 s, 8 s, 16 s … capped at ``max_delay``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import tenacity

from ..errors import check_duration

Exhausted = Literal["stall", "fail"]


class _Attempt:
    """The one attribute of ``tenacity.RetryCallState`` its wait strategies read."""

    def __init__(self, attempt_number: int) -> None:
        self.attempt_number = attempt_number


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When to retry a step that raised a retryable error.

    Attributes:
        max_attempts: consecutive failures allowed before the policy gives up (the seed's
            5). A ``Snooze`` or a lock wait is not a failure and never uses one up.
        initial_delay: seconds to wait after the first failure.
        max_delay: cap on any single wait, in seconds.
        multiplier: growth factor between consecutive waits.
        jitter: add up to ``initial_delay`` seconds of random jitter (thundering herds).
        on_exhausted: ``"stall"`` (wait for a condition, auto-retry later) or ``"fail"``.
        stall_retry_after: seconds a STALLED instance waits before it is tried again.
    """

    max_attempts: int = 5
    initial_delay: float = 1.0
    max_delay: float = 60.0
    multiplier: float = 2.0
    jitter: bool = True
    on_exhausted: Exhausted = "stall"
    stall_retry_after: float = 300.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        check_duration("initial_delay", self.initial_delay)
        check_duration("max_delay", self.max_delay)
        check_duration("stall_retry_after", self.stall_retry_after)
        if not math.isfinite(self.multiplier):
            raise ValueError(f"multiplier must be finite, got {self.multiplier}")
        # Below 1 the waits would shrink as failures grow: retrying faster the longer a
        # dependency stays down.
        if self.multiplier < 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if self.on_exhausted not in ("stall", "fail"):
            raise ValueError(f"on_exhausted must be 'stall' or 'fail', got {self.on_exhausted!r}")

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th consecutive failure (1-based)."""
        # A long failure streak is safe: tenacity returns max_delay once the exponent
        # passes it (an overflow included) rather than raising.
        strategy: tenacity.wait.wait_base
        if self.jitter:
            strategy = tenacity.wait_exponential_jitter(
                initial=self.initial_delay,
                max=self.max_delay,
                exp_base=self.multiplier,
                jitter=self.initial_delay,
            )
        else:
            strategy = tenacity.wait_exponential(
                multiplier=self.initial_delay, max=self.max_delay, exp_base=self.multiplier
            )
        return float(strategy(_Attempt(failures)))  # type: ignore[arg-type]

    def exhausted(self, failures: int) -> bool:
        """True when ``failures`` consecutive failures use up the policy."""
        return failures >= self.max_attempts


DEFAULT_RETRY = RetryPolicy()
