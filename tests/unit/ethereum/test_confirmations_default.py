"""One default confirmation depth, shared by the transaction queue and the ChaosChain example."""

from __future__ import annotations

from examples.chaoschain import ChaosChainSettings
from statemachine_wf.adapters.ethereum.txqueue import DEFAULT_CONFIRMATIONS, QueueSettings


def test_queue_and_chaoschain_settings_share_one_default_depth() -> None:
    settings = ChaosChainSettings(contract_address="0x" + "11" * 20)
    assert QueueSettings().confirmations == DEFAULT_CONFIRMATIONS
    assert settings.confirmations == DEFAULT_CONFIRMATIONS
    assert settings.queue.confirmations == DEFAULT_CONFIRMATIONS
    # One block deep is undone by a one-block reorg; the default survives one.
    assert DEFAULT_CONFIRMATIONS == 2
