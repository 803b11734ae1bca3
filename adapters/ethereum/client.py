"""A thin, synchronous Ethereum client for money-moving workflows.

It does the few things a durable transaction queue needs, with every failure mapped to
:mod:`statemachine_wf.adapters.ethereum.errors`:

* build an EIP-1559 transaction (fees from the chain, estimated gas with a margin);
* send signed raw bytes (idempotent: re-sending the same bytes reports
  :class:`~statemachine_wf.adapters.ethereum.errors.AlreadyKnown` with the hash);
* decide a transaction's fate, :meth:`EthereumClient.receipt_status`, under a
  confirmation rule (N blocks, or the ``safe``/``finalized`` tags);
* replace a stuck transaction, :meth:`EthereumClient.bump_fees`.

It works over any web3 provider: a JSON-RPC node (anvil, geth) and the in-process
``EthereumTesterProvider`` (py-evm), whose differences it hides.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any, Literal, TypeAlias, cast

from eth_typing import ChecksumAddress
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak
from hexbytes import HexBytes
from web3 import Web3
from web3.contract import Contract
from web3.exceptions import TransactionNotFound
from web3.types import BlockIdentifier, TxParams

from statemachine_wf.definition.redact import install_log_redaction, redact_url
from statemachine_wf.errors import InputError

from .errors import (
    AlreadyKnown,
    ChainError,
    ConfirmationTimeout,
    NonceTooLow,
    Reverted,
    chain_errors,
    classify,
    decode_revert_data,
)
from .heads import HeadWatcher
from .signer import SignedTx
from .transport import http_session

__all__ = [
    "ConfirmationRule",
    "EthereumClient",
    "Fees",
    "TxKind",
    "TxStatus",
]

TxKind: TypeAlias = Literal["confirmed", "reverted", "pending", "not_found"]
ConfirmationRule: TypeAlias = int | Literal["safe", "finalized"]
"""Blocks of depth (1 = mined), or a block tag the transaction's block must be under."""

MIN_BUMP_FACTOR = Fraction(11, 10)  # geth's default txpool price bump is 10%


@dataclass(frozen=True, slots=True)
class TxStatus:
    """What the chain says about a transaction, under a confirmation rule.

    Attributes:
        kind: ``confirmed`` (succeeded, rule met), ``reverted`` (failed, rule met),
            ``pending`` (in the pool, or mined but not deep enough yet), ``not_found``
            (unknown to the node: never broadcast, dropped, replaced, or reorged out).
        tx_hash: The transaction hash, 0x-hex.
        block_number: The block it was mined in; None while not mined.
        confirmations: ``head - block_number + 1``; 0 while not mined.
        receipt_status: 1 or 0 once mined (so a ``pending`` can show it will revert).
        revert_reason: For ``reverted``: the reason, when it can be recovered.
        contract_address: For a mined contract creation: the new contract.
    """

    kind: TxKind
    tx_hash: str
    block_number: int | None = None
    confirmations: int = 0
    receipt_status: int | None = None
    revert_reason: str | None = None
    contract_address: ChecksumAddress | None = None

    @property
    def final(self) -> bool:
        """Whether the rule is met (``confirmed`` or ``reverted``)."""
        return self.kind in ("confirmed", "reverted")


@dataclass(frozen=True, slots=True)
class Fees:
    """EIP-1559 fee fields, in wei."""

    max_fee_per_gas: int
    max_priority_fee_per_gas: int


def _hex(value: bytes | str) -> str:
    return HexBytes(value).to_0x_hex()


class EthereumClient:
    """Chain access for the transaction queue and the reconcilers.

    Args:
        w3: A connected Web3 (HTTP to a node, or ``EthereumTesterProvider``).
    """

    def __init__(self, w3: Web3) -> None:
        self.w3 = w3
        self._contracts: dict[tuple[str, int], tuple[Sequence[Mapping[str, Any]], Contract]] = {}
        self._heads: dict[float, HeadWatcher] = {}
        self._heads_lock = threading.Lock()
        endpoint = getattr(w3.provider, "endpoint_uri", None)
        # Kept for redaction only: an API key in the URL never reaches an error or a log.
        self._url: str | None = str(endpoint) if endpoint else None
        if self._url is not None:
            install_log_redaction()

    @classmethod
    def from_url(cls, url: str, *, timeout: float = 10.0) -> EthereumClient:
        """Connect to a JSON-RPC node over HTTP.

        Args:
            url: The node's HTTP endpoint.
            timeout: Seconds per request (connect and read) before
                :class:`~statemachine_wf.adapters.ethereum.errors.RpcUnavailable`.
        """
        provider = Web3.HTTPProvider(
            url,
            request_kwargs={"timeout": timeout},
            session=http_session(url),
            # No hidden retries under ours: the queue's retry policy decides, and an outage
            # must surface as RpcUnavailable after `timeout`, not after web3's backoff.
            exception_retry_configuration=None,
        )
        return cls(Web3(provider))

    def heads(self, interval: float) -> HeadWatcher | None:
        """This client's watcher of new head blocks, asking every ``interval`` s (one per
        interval, made on first use; see :mod:`.heads`). None where there is nothing to
        watch (the in-memory chain moves only when told)."""
        with self._heads_lock:
            watcher = self._heads.get(interval)
            if watcher is None:
                watcher = self._heads[interval] = HeadWatcher(self, interval)
            return watcher

    def close(self) -> None:
        """Stop the head watchers; close the HTTP connections (of :meth:`from_url`'s
        session, or web3's per thread)."""
        with self._heads_lock:
            watchers, self._heads = list(self._heads.values()), {}
        for watcher in watchers:
            watcher.close()
        provider = self.w3.provider
        session = getattr(provider, "_request_session_manager", None)
        if session is None:
            return
        explicit = getattr(session, "_explicit_session", None)
        if explicit is not None:
            explicit.close()
        for _, cached in list(session.session_cache.items()):
            cached.close()
        session.session_cache.clear()

    def __repr__(self) -> str:
        if self._url is not None:
            return f"EthereumClient({redact_url(self._url)!r})"
        return f"EthereumClient({type(self.w3.provider).__name__})"

    def errors(self) -> contextlib.AbstractContextManager[None]:
        """:func:`~statemachine_wf.adapters.ethereum.errors.chain_errors` for this node.

        Use it around direct ``client.w3`` calls: failures become chain errors whose
        messages never show the endpoint's credentials.
        """
        return chain_errors(self._url)

    # --- reading ------------------------------------------------------------------------

    @cached_property
    def chain_id(self) -> int:
        """The chain id (asked once, then cached: it cannot change under a connection)."""
        with chain_errors(self._url):
            return int(self.w3.eth.chain_id)

    def block_number(self) -> int:
        """The head block number."""
        with chain_errors(self._url):
            return int(self.w3.eth.block_number)

    def nonce(self, address: str, block: Literal["latest", "pending"] = "latest") -> int:
        """The address's transaction count at ``latest`` (mined) or ``pending`` (+ pool).

        The first unmined nonce is ``nonce(a, "latest")``; the next free one is
        ``nonce(a, "pending")``.
        """
        with chain_errors(self._url):
            return int(self.w3.eth.get_transaction_count(to_checksum_address(address), block))

    def contract(self, address: str, abi: Sequence[Mapping[str, Any]]) -> Contract:
        """A web3 contract object bound to this client.

        Kept per address and ABI object: building one parses the ABI and hashes every
        function's selector (3 % of a chain step's CPU when a ContractCall built it anew
        for each step). The ABI is held with it, so its ``id`` cannot name another one.
        """
        key = (address.lower(), id(abi))
        found = self._contracts.get(key)
        if found is not None and found[0] is abi:
            return found[1]
        contract = self.w3.eth.contract(address=to_checksum_address(address), abi=cast(Any, abi))
        if len(self._contracts) >= 256:
            self._contracts.clear()
        self._contracts[key] = (abi, contract)
        return contract

    def call_view(
        self, contract: Contract, fn: str, *args: Any, block: BlockIdentifier = "latest"
    ) -> Any:
        """Call a view function.

        Raises:
            Reverted: The call reverted.
            RpcUnavailable: The node is unreachable.
        """
        with chain_errors(self._url):
            return contract.get_function_by_name(fn)(*args).call(block_identifier=block)

    # --- building -----------------------------------------------------------------------

    def suggest_fees(self) -> Fees:
        """Fees that get a transaction into the next blocks: ``2 * baseFee + tip``.

        Doubling the base fee keeps the transaction valid through six full blocks of
        base-fee increases without a replacement. The base fee is the higher of the head
        block's and the pending block's (the one the transaction would go in; a node
        that validates against it refuses a fee cap priced on the head alone when the
        next base fee jumps, as anvil's ``anvil_setNextBlockBaseFeePerGas`` makes it).
        """
        with chain_errors(self._url):
            tip = int(self.w3.eth.max_priority_fee)
            base = int(self.w3.eth.get_block("latest").get("baseFeePerGas", 0))
            try:
                pending = self.w3.eth.get_block("pending").get("baseFeePerGas", 0)
            except Exception:  # a node without a pending block: the head's is the price
                pending = 0
            base = max(base, int(pending or 0))
        return Fees(max_fee_per_gas=2 * base + tip, max_priority_fee_per_gas=tip)

    def estimate_gas(self, tx: Mapping[str, Any]) -> int:
        """Estimate gas for a transaction dict.

        Raises:
            Reverted: The transaction would revert (the reason is in ``.reason``).
        """
        fields = {k: tx[k] for k in ("from", "to", "data", "value") if tx.get(k) is not None}
        with chain_errors(self._url):
            return int(self.w3.eth.estimate_gas(cast(TxParams, fields)))

    def build_transaction(
        self,
        *,
        sender: str,
        to: str | None,
        data: str,
        value: int = 0,
        nonce: int | None = None,
        gas: int | None = None,
        gas_margin: float = 1.2,
        fees: Fees | None = None,
    ) -> dict[str, Any]:
        """Build a complete EIP-1559 transaction dict, ready for a signer.

        Args:
            sender: The address it is sent from.
            to: The target; None for a contract creation.
            data: The calldata (or init code), 0x-hex.
            value: Wei sent along.
            nonce: The nonce; ``nonce(sender, "pending")`` if None. A queue that owns the
                sender's nonces should always pass it.
            gas: A fixed gas limit; if None, the estimate times ``gas_margin`` (the
                estimate is where a revert is seen *before* sending).
            gas_margin: Multiplier on the estimate.
            fees: The fee fields; :meth:`suggest_fees` if None.

        Raises:
            Reverted: Estimation shows the call reverts.
        """
        tx: dict[str, Any] = {
            "type": 2,
            "chainId": self.chain_id,
            "from": to_checksum_address(sender),
            "data": data,
            "value": value,
        }
        if to is not None:
            tx["to"] = to_checksum_address(to)
        if gas is None:
            gas = math.ceil(self.estimate_gas(tx) * gas_margin)
        fees = fees or self.suggest_fees()
        tx.update(
            gas=gas,
            nonce=self.nonce(sender, "pending") if nonce is None else nonce,
            maxFeePerGas=fees.max_fee_per_gas,
            maxPriorityFeePerGas=fees.max_priority_fee_per_gas,
        )
        return tx

    def build_call(
        self, contract: Contract, fn: str, *args: Any, sender: str, **options: Any
    ) -> dict[str, Any]:
        """Build a transaction calling ``contract.fn(*args)``.

        ``options`` are :meth:`build_transaction`'s (``nonce``, ``gas``, ``value``,
        ``gas_margin``, ``fees``).

        Raises:
            InputError: The arguments do not fit the function's ABI.
            Reverted: Estimation shows the call reverts (unless ``gas`` is fixed).
        """
        try:
            data = contract.encode_abi(fn, args=list(args))
        except Exception as exc:  # local ABI validation: bad input, not a chain failure
            raise InputError(f"cannot encode {fn}{tuple(args)!r}: {exc}") from exc
        return self.build_transaction(sender=sender, to=contract.address, data=data, **options)

    def bump_fees(self, tx: Mapping[str, Any], *, factor: float = 1.125) -> dict[str, Any]:
        """A replacement for a stuck transaction: same nonce, both fee fields raised.

        Each fee becomes at least ``ceil(old * factor)`` (nodes require >= +10% on both to
        replace), and at least what :meth:`suggest_fees` says now, in case the base fee
        has risen past the old cap.

        Args:
            tx: The transaction to replace (EIP-1559 fields).
            factor: The minimum raise, >= 1.1.

        Raises:
            InputError: ``factor`` < 1.1 or ``tx`` lacks the EIP-1559 fee fields.
        """
        bump = Fraction(str(factor))
        if bump < MIN_BUMP_FACTOR:
            raise InputError(
                f"factor must be >= 1.1 for a replacement to be accepted; got {factor}"
            )
        try:
            old_max, old_tip = int(tx["maxFeePerGas"]), int(tx["maxPriorityFeePerGas"])
        except KeyError as exc:
            raise InputError(f"tx has no {exc.args[0]}: only EIP-1559 txs are bumped") from None
        market = self.suggest_fees()
        tip = max(math.ceil(old_tip * bump), old_tip + 1, market.max_priority_fee_per_gas)
        max_fee = max(math.ceil(old_max * bump), old_max + 1, market.max_fee_per_gas, tip)
        return {**tx, "maxFeePerGas": max_fee, "maxPriorityFeePerGas": tip}

    # --- sending ------------------------------------------------------------------------

    def send_raw(self, raw: SignedTx | bytes | str) -> str:
        """Broadcast a signed transaction.

        Args:
            raw: A :class:`SignedTx`, raw bytes or 0x-hex.

        Returns:
            The transaction hash, 0x-hex.

        Raises:
            AlreadyKnown: These exact bytes are already in the pool or mined (with
                ``tx_hash``): not an error for an idempotent re-send after a crash.
            NonceTooLow: Another transaction used the nonce.
            ReplacementUnderpriced: A pending tx has the nonce; bump its fees >= 10%.
            InsufficientFunds: The sender cannot pay.
            RpcUnavailable: The node is unreachable.
        """
        data = raw.raw if isinstance(raw, SignedTx) else HexBytes(raw)
        tx_hash = _hex(keccak(data))
        try:
            return _hex(self.w3.eth.send_raw_transaction(data))
        except Exception as exc:
            error = classify(exc, self._url)
            if isinstance(error, AlreadyKnown):
                error.tx_hash = tx_hash
            elif isinstance(error, NonceTooLow) and self._known(tx_hash):
                # A mined tx re-sent reads "nonce too low" (py-evm says so even for a
                # duplicate): if the chain has these exact bytes, it is AlreadyKnown.
                error = AlreadyKnown(f"transaction {tx_hash} is already mined", tx_hash=tx_hash)
            raise error from exc

    def _known(self, tx_hash: str) -> bool:
        try:
            with chain_errors(self._url):
                self.w3.eth.get_transaction(HexBytes(tx_hash))
        except TransactionNotFound:
            return False
        except ChainError as exc:
            if isinstance(exc.__cause__, TransactionNotFound):
                return False
            raise
        return True

    # --- fate ---------------------------------------------------------------------------

    def is_pending(self, tx_hash: str) -> bool:
        """Whether the node holds the transaction in its pool (known, not yet mined)."""
        try:
            with chain_errors(self._url):
                tx = self.w3.eth.get_transaction(HexBytes(tx_hash))
        except ChainError as exc:
            if isinstance(exc.__cause__, TransactionNotFound):
                return False
            raise
        return tx.get("blockNumber") is None

    def pending_count(self, address: str) -> int:
        """How many of the address's transactions are in the pool, not yet mined.

        On py-evm (which mines every transaction at once) this is always 0.
        """
        return self.nonce(address, "pending") - self.nonce(address, "latest")

    def pending_transactions(self, address: str) -> dict[int, str] | None:
        """The address's pooled transactions, nonce -> hash, from ``txpool_content``.

        Returns:
            The map (``pending`` and ``queued`` together), or None when the node does not
            offer ``txpool_content`` (py-evm, many hosted RPCs).
        """
        with chain_errors(self._url):
            response = self.w3.provider.make_request(cast(Any, "txpool_content"), [])
        result = response.get("result")
        if not isinstance(result, Mapping):
            return None
        found: dict[int, str] = {}
        for section in ("pending", "queued"):
            for sender, by_nonce in (result.get(section) or {}).items():
                if str(sender).lower() != address.lower():
                    continue
                for nonce, tx in by_nonce.items():
                    found[int(nonce)] = str(tx["hash"])
        return found

    def receipt_status(self, tx_hash: str, *, confirmations: ConfirmationRule = 1) -> TxStatus:
        """Decide a transaction's fate.

        Args:
            tx_hash: The transaction hash.
            confirmations: The rule: N >= 1 blocks of depth (1 = mined in the head block),
                or ``"safe"``/``"finalized"`` (its block is at or below that tag).

        Returns:
            The status. ``reverted`` carries the reason, recovered with
            ``debug_traceTransaction`` where the node has it, else by replaying the call
            at ``blockNumber - 1``.

        Raises:
            RpcUnavailable: The node is unreachable.
        """
        if isinstance(confirmations, int) and confirmations < 1:
            raise InputError(
                f"confirmations must be >= 1 or 'safe'/'finalized'; got {confirmations}"
            )
        try:
            with chain_errors(self._url):
                receipt = self.w3.eth.get_transaction_receipt(HexBytes(tx_hash))
        except ChainError as exc:
            if not isinstance(exc.__cause__, TransactionNotFound):
                raise
            kind: TxKind = "pending" if self.is_pending(tx_hash) else "not_found"
            return TxStatus(kind=kind, tx_hash=_hex(tx_hash))
        with chain_errors(self._url):
            number = int(receipt["blockNumber"])
            head = int(self.w3.eth.block_number)
            canonical = self.w3.eth.get_block(number)
            if isinstance(confirmations, str):
                met = int(self.w3.eth.get_block(confirmations)["number"]) >= number
            else:
                met = head - number + 1 >= confirmations
        status = int(receipt["status"])
        created = receipt.get("contractAddress")
        base = TxStatus(
            kind="pending",
            tx_hash=_hex(tx_hash),
            block_number=number,
            confirmations=max(head - number + 1, 0),
            receipt_status=status,
            contract_address=to_checksum_address(created) if created else None,
        )
        if canonical.get("hash") != receipt["blockHash"]:
            # The receipt names a block no longer on the canonical chain: a reorg is in
            # progress under us. Not final; the next poll sees the new truth.
            return _replace(base, confirmations=0)
        if not met:
            return base
        if status == 1:
            return _replace(base, kind="confirmed")
        return _replace(base, kind="reverted", revert_reason=self.revert_reason(tx_hash))

    def revert_reason(self, tx_hash: str) -> str | None:
        """Recover why a mined transaction reverted (None if it cannot be told)."""
        response = None
        try:
            response = self.w3.provider.make_request(
                cast(Any, "debug_traceTransaction"), [_hex(tx_hash), {"tracer": "callTracer"}]
            )
        except Exception:  # optional method (py-evm, hosted RPCs): replay below instead
            response = None
        trace = response.get("result") if response else None
        if isinstance(trace, Mapping) and trace.get("error"):
            reason = trace.get("revertReason")
            if reason:
                return str(reason)
            decoded = decode_revert_data(trace.get("output"))
            if decoded:
                return decoded
        with chain_errors(self._url):
            tx = self.w3.eth.get_transaction(HexBytes(tx_hash))
        call = {
            "from": tx["from"],
            "to": tx.get("to"),
            "data": tx.get("input"),
            "value": tx.get("value", 0),
            "gas": tx.get("gas"),
        }
        block = int(tx["blockNumber"] or 1) - 1
        try:
            self.w3.eth.call(
                cast(TxParams, {k: v for k, v in call.items() if v is not None}), block
            )
        except Exception as exc:
            error = classify(exc, self._url)
            if isinstance(error, Reverted):
                return error.reason
            raise error from exc
        return None  # the replay succeeded: the revert depended on its own block's state

    def wait(
        self,
        tx_hash: str,
        *,
        confirmations: ConfirmationRule = 1,
        timeout: float = 30.0,
        poll_interval: float = 0.1,
    ) -> TxStatus:
        """Poll :meth:`receipt_status` until the rule is met.

        Returns:
            The final status (``confirmed`` or ``reverted``).

        Raises:
            ConfirmationTimeout: Still ``pending`` or ``not_found`` after ``timeout``.
        """
        deadline = time.monotonic() + timeout
        while True:
            status = self.receipt_status(tx_hash, confirmations=confirmations)
            if status.final:
                return status
            if time.monotonic() >= deadline:
                raise ConfirmationTimeout(status.tx_hash, status.kind, timeout)
            time.sleep(poll_interval)


def _replace(status: TxStatus, **changes: Any) -> TxStatus:
    return dataclasses.replace(status, **changes)
