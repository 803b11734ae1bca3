"""ChaosChain's contract views at the confirmation depth (moved out of the library).

The workflows declare their "already done?" checks with ``view_check``; these helpers read
the same views for the demo and tests. Each reads at ``confirmations`` depth (default: the
queue's ``DEFAULT_CONFIRMATIONS``) so that "on-chain wins" never trusts a reorgable block.
"""

from __future__ import annotations

from web3.contract import Contract

from statemachine_wf.adapters.ethereum import ConfirmationRule, EthereumClient
from statemachine_wf.adapters.ethereum.txqueue import DEFAULT_CONFIRMATIONS
from statemachine_wf.adapters.ethereum.types import b32 as _b32
from statemachine_wf.reconcilers.ethereum import view

__all__ = ["epoch_closed", "score_submitted", "work_evidence", "work_submitted"]


def work_submitted(
    client: EthereumClient,
    contract: Contract,
    studio: str,
    epoch: int,
    data_hash: str | bytes,
    *,
    confirmations: ConfirmationRule = DEFAULT_CONFIRMATIONS,
) -> bool:
    """ChaosChain: is work ``data_hash`` of ``studio``/``epoch`` on chain (at depth)?"""
    return bool(
        view(
            client,
            contract,
            "workSubmitted",
            studio,
            epoch,
            _b32(data_hash),
            confirmations=confirmations,
        )
    )


def work_evidence(
    client: EthereumClient,
    contract: Contract,
    studio: str,
    epoch: int,
    data_hash: str | bytes,
    *,
    confirmations: ConfirmationRule = DEFAULT_CONFIRMATIONS,
) -> tuple[str, str] | None:
    """ChaosChain: who submitted the work and with which evidence id, or None."""
    answer = view(
        client,
        contract,
        "workEvidence",
        studio,
        epoch,
        _b32(data_hash),
        confirmations=confirmations,
    )
    if answer is None:
        return None
    submitter, evidence_id = answer
    if int(str(submitter), 16) == 0:
        return None
    return str(submitter), str(evidence_id)


def score_submitted(
    client: EthereumClient,
    contract: Contract,
    studio: str,
    epoch: int,
    data_hash: str | bytes,
    scorer: str,
    *,
    confirmations: ConfirmationRule = DEFAULT_CONFIRMATIONS,
) -> bool:
    """ChaosChain: has ``scorer`` scored this work (at depth)?"""
    return bool(
        view(
            client,
            contract,
            "scoreSubmitted",
            studio,
            epoch,
            _b32(data_hash),
            scorer,
            confirmations=confirmations,
        )
    )


def epoch_closed(
    client: EthereumClient,
    contract: Contract,
    studio: str,
    epoch: int,
    *,
    confirmations: ConfirmationRule = DEFAULT_CONFIRMATIONS,
) -> bool:
    """ChaosChain: is the epoch closed (at depth)?"""
    return bool(view(client, contract, "epochClosed", studio, epoch, confirmations=confirmations))
