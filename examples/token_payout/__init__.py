"""Token payouts from one treasury signer, each paid once (see :mod:`.workflows`)."""

from __future__ import annotations

from .workflows import PayoutInput, PayoutSettings, TokenPayout

__all__ = ["PayoutInput", "PayoutSettings", "TokenPayout"]
