"""Reading a contract as of the confirmation depth: views and event queries.

"On-chain wins" (seed 002) is only safe for an effect a reorg can no longer undo, so an
"already done?" check reads the contract at ``head - confirmations + 1`` (or at the
``safe``/``finalized`` tag). Re-exported by :mod:`statemachine_wf.reconcilers.ethereum`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eth_utils.address import to_checksum_address
from web3.contract import Contract
from web3.exceptions import BadFunctionCallOutput
from web3.types import BlockIdentifier

from .client import ConfirmationRule, EthereumClient
from .errors import ChainError
from .txqueue import DEFAULT_CONFIRMATIONS

__all__ = ["events_at_depth", "view", "view_block"]


def view_block(
    client: EthereumClient, confirmations: ConfirmationRule = DEFAULT_CONFIRMATIONS
) -> BlockIdentifier:
    """The block a read must be made at for its answer to be ``confirmations`` deep.

    ``1`` is the head; ``N`` is ``head - N + 1`` (never below 0); the ``safe`` and
    ``finalized`` tags are passed through. The default is the queue's
    :data:`~statemachine_wf.adapters.ethereum.txqueue.DEFAULT_CONFIRMATIONS`.
    """
    if isinstance(confirmations, str):
        return confirmations
    return max(client.block_number() - max(confirmations, 1) + 1, 0)


def view(
    client: EthereumClient,
    contract: Contract,
    fn: str,
    *args: Any,
    confirmations: ConfirmationRule = DEFAULT_CONFIRMATIONS,
) -> Any:
    """Call a view function as of the confirmation depth (see :func:`view_block`).

    Returns:
        The view's result; None when the contract did not exist yet at that block.

    Raises:
        RpcUnavailable: The node is unreachable.
        Reverted: The view reverted.
    """
    block = view_block(client, confirmations)
    try:
        return client.call_view(contract, fn, *args, block=block)
    except ChainError as exc:
        # At a block before the contract was deployed a view returns no data at all:
        # nothing can have happened there yet. Anything else is a real failure.
        if isinstance(exc.__cause__, BadFunctionCallOutput) and not _has_code(
            client, contract.address, block
        ):
            return None
        raise


def events_at_depth(
    client: EthereumClient,
    contract: Contract,
    event: str,
    filters: Mapping[str, Any],
    *,
    confirmations: ConfirmationRule = DEFAULT_CONFIRMATIONS,
    from_block: int = 0,
) -> list[dict[str, Any]]:
    """The contract's ``event`` logs matching ``filters`` (indexed arguments), at depth.

    Returns:
        Each log's decoded arguments with ``blockNumber`` and ``transactionHash``.
    """
    to_block = view_block(client, confirmations)
    with client.errors():
        logs = contract.events[event].get_logs(
            from_block=from_block, to_block=to_block, argument_filters=dict(filters)
        )
    return [
        {
            **dict(log["args"]),
            "blockNumber": int(log["blockNumber"]),
            "transactionHash": log["transactionHash"].to_0x_hex(),
        }
        for log in logs
    ]


def _has_code(client: EthereumClient, address: str, block: BlockIdentifier) -> bool:
    with client.errors():
        return len(client.w3.eth.get_code(to_checksum_address(address), block)) > 0
