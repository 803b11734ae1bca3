"""An in-memory chain for fast tests: nonces, a pool, blocks, reverts, views at depth.

For property tests of on-chain workflows only; the real-node (anvil) tests stay the main
tests. The contract is a plain Python object: each transaction calls its method
``function(sender, *args)`` (raise :class:`FakeRevert` to revert) and each view calls
``view(*args)``, on the state as of the block asked::

    class Registry:
        def __init__(self) -> None:
            self.done: set[bytes] = set()

        def submit(self, sender: str, key: bytes) -> None:
            if key in self.done:
                raise FakeRevert("already submitted")
            self.done.add(key)

        def isDone(self, key: bytes) -> bool:
            return key in self.done

    chain = FakeChain(Registry())          # an EthereumClient: give it as ``eth``
    signer = chain.new_signer()            # a LocalSigner with a throwaway key

Transactions are really signed (the queue's records are real) and decoded on receipt;
the calldata is the function name and arguments (no ABI needed: ``abi = ()`` will do).
By default each accepted transaction is mined at once in its own block
(``automine``); :meth:`FakeChain.drop`, :meth:`FakeChain.reorg`, :meth:`FakeChain.mine`
and ``automine = False`` make the other fates.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from eth_account import Account
from eth_account.typed_transactions.typed_transaction import TypedTransaction
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak
from hexbytes import HexBytes
from web3 import Web3
from web3.contract import Contract
from web3.types import BlockIdentifier

from .client import ConfirmationRule, EthereumClient, Fees, TxStatus
from .errors import AlreadyKnown, NonceTooLow, ReplacementUnderpriced, Reverted
from .heads import HeadWatcher
from .signer import LocalSigner, SignedTx

__all__ = ["FakeChain", "FakeRevert"]


class FakeRevert(Exception):
    """Raised by a fake contract's method: the call reverts with ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class _Tx:
    tx_hash: str
    sender: str
    nonce: int
    function: str
    args: tuple[Any, ...]
    tip: int
    block: int | None = None
    revert_reason: str | None = None
    reverted: bool = False


def _encode(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"__bytes__": value.hex()}
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and "__bytes__" in value:
        return bytes.fromhex(value["__bytes__"])
    if isinstance(value, list):
        return tuple(_decode(v) for v in value)
    return value


class FakeChain(EthereumClient):
    """An :class:`EthereumClient` over an in-memory chain and one Python contract model.

    Args:
        model: The contract's state and logic (see the module docstring).
        chain_id: The chain id signed into transactions.
        automine: Mine each accepted transaction at once, in its own block.
        blocks_per_look: Empty blocks mined each time a mined transaction's receipt is
            asked for: the chain moves on while a workflow waits for depth. (Other waits,
            a dropped transaction's timeout say, move on with :meth:`mine`: the clock is
            12 s a block.)
    """

    def __init__(
        self,
        model: Any,
        *,
        chain_id: int = 31337,
        automine: bool = True,
        blocks_per_look: int = 1,
    ) -> None:
        super().__init__(Web3())
        self.model = model
        self.automine = automine
        self.blocks_per_look = blocks_per_look
        self._chain_id = chain_id
        self._lock = threading.RLock()
        self._states: list[Any] = [copy.deepcopy(model)]  # state after each block
        self._pool: dict[str, _Tx] = {}
        self._mined: dict[str, _Tx] = {}
        self._signers = 0

    def __repr__(self) -> str:
        return f"FakeChain(block {self.block_number()})"

    @cached_property
    def chain_id(self) -> int:
        return self._chain_id

    def new_signer(self) -> LocalSigner:
        """A signer with a throwaway key (deterministic per chain, never a real one)."""
        self._signers += 1
        return LocalSigner.from_private_key("0x" + keccak(b"fake %d" % self._signers).hex())

    # --- the chain ----------------------------------------------------------------------

    def block_number(self) -> int:
        with self._lock:
            return len(self._states) - 1

    def heads(self, interval: float) -> HeadWatcher | None:
        return None  # blocks come only from mine(): the await step polls (no thread)

    def _latest(self, address: str) -> int:
        return sum(1 for t in self._mined.values() if t.sender == address.lower())

    def nonce(self, address: str, block: Literal["latest", "pending"] = "latest") -> int:
        with self._lock:
            n = self._latest(address)
            if block == "pending":
                pooled = {t.nonce for t in self._pool.values() if t.sender == address.lower()}
                while n in pooled:
                    n += 1
            return n

    def clock(self) -> float:
        """The chain's time: 12 s a block (the queue's clock, so runs are repeatable)."""
        return 1_700_000_000.0 + 12.0 * self.block_number()

    def mine(self, blocks: int = 1, *, empty: bool = False) -> None:
        """Mine ``blocks`` blocks, each taking every pooled transaction it can."""
        with self._lock:
            for _ in range(blocks):
                state = copy.deepcopy(self._states[-1])
                number = len(self._states)
                pool = [] if empty else sorted(self._pool.values(), key=lambda t: t.nonce)
                for tx in pool:
                    if tx.nonce != self._latest(tx.sender):
                        continue
                    try:
                        getattr(state, tx.function)(tx.sender, *tx.args)
                    except FakeRevert as exc:
                        tx.reverted, tx.revert_reason = True, exc.reason
                    tx.block = number
                    del self._pool[tx.tx_hash]
                    self._mined[tx.tx_hash] = tx
                self._states.append(state)
                self.model = state

    def drop(self, tx_hash: str) -> bool:
        """Forget a pooled transaction (the node dropped it)."""
        with self._lock:
            return self._pool.pop(tx_hash, None) is not None

    def reorg(self, depth: int) -> None:
        """Take back the last ``depth`` blocks; their transactions return to the pool."""
        with self._lock:
            keep = max(len(self._states) - depth, 1)
            for tx in [t for t in self._mined.values() if (t.block or 0) >= keep]:
                del self._mined[tx.tx_hash]
                tx.block, tx.reverted, tx.revert_reason = None, False, None
                self._pool[tx.tx_hash] = tx
            del self._states[keep:]
            self.model = self._states[-1]

    def pooled(self) -> list[str]:
        """The hashes in the pool."""
        with self._lock:
            return list(self._pool)

    def sent(self, function: str | None = None) -> list[tuple[str, tuple[Any, ...]]]:
        """Every mined transaction's (function, args), oldest first."""
        with self._lock:
            txs = sorted(self._mined.values(), key=lambda t: (t.block or 0, t.nonce))
            return [(t.function, t.args) for t in txs if function in (None, t.function)]

    # --- the client's interface -----------------------------------------------------------

    def call_view(
        self, contract: Contract, fn: str, *args: Any, block: BlockIdentifier = "latest"
    ) -> Any:
        with self._lock:
            number = block if isinstance(block, int) else len(self._states) - 1
            return getattr(self._states[min(number, len(self._states) - 1)], fn)(*args)

    def suggest_fees(self) -> Fees:
        return Fees(max_fee_per_gas=2_000_000_000, max_priority_fee_per_gas=1_000_000_000)

    def build_call(
        self, contract: Contract, fn: str, *args: Any, sender: str, **options: Any
    ) -> dict[str, Any]:
        with self._lock:  # "estimate gas": run it on the head state
            try:
                getattr(copy.deepcopy(self._states[-1]), fn)(sender.lower(), *args)
            except FakeRevert as exc:
                raise Reverted(exc.reason) from None
        data = "0x" + json.dumps([fn, _encode(list(args))]).encode().hex()
        fees = self.suggest_fees()
        return {
            "type": 2,
            "chainId": self.chain_id,
            "from": to_checksum_address(sender),
            "to": contract.address,
            "data": data,
            "value": 0,
            "gas": 100_000,
            "nonce": options.get("nonce", self.nonce(sender, "pending")),
            "maxFeePerGas": fees.max_fee_per_gas,
            "maxPriorityFeePerGas": fees.max_priority_fee_per_gas,
        }

    def send_raw(self, raw: SignedTx | bytes | str) -> str:
        data = raw.raw if isinstance(raw, SignedTx) else raw
        blob = bytes.fromhex(data.removeprefix("0x")) if isinstance(data, str) else bytes(data)
        tx_hash = "0x" + keccak(blob).hex()
        fields = TypedTransaction.from_bytes(HexBytes(blob)).as_dict()
        sender = str(Account.recover_transaction(blob)).lower()
        fn, args = json.loads(bytes(fields["data"]).decode())
        tx = _Tx(tx_hash, sender, int(fields["nonce"]), fn, _decode(args),
                 int(fields["maxPriorityFeePerGas"]))  # fmt: skip
        with self._lock:
            if tx_hash in self._pool or tx_hash in self._mined:
                raise AlreadyKnown(tx_hash=tx_hash)
            if tx.nonce < self._latest(sender):
                raise NonceTooLow("nonce too low")
            for other in list(self._pool.values()):
                if (other.sender, other.nonce) == (sender, tx.nonce):
                    if tx.tip * 10 < other.tip * 11:
                        raise ReplacementUnderpriced("replacement transaction underpriced")
                    del self._pool[other.tx_hash]
            self._pool[tx_hash] = tx
            if self.automine:
                self.mine()
        return tx_hash

    def is_pending(self, tx_hash: str) -> bool:
        with self._lock:
            return tx_hash in self._pool

    def pending_transactions(self, address: str) -> dict[int, str] | None:
        with self._lock:
            return {t.nonce: h for h, t in self._pool.items() if t.sender == address.lower()}

    def receipt_status(self, tx_hash: str, *, confirmations: ConfirmationRule = 1) -> TxStatus:
        with self._lock:
            if tx_hash in self._pool:
                return TxStatus(kind="pending", tx_hash=tx_hash)
            tx = self._mined.get(tx_hash)
            if tx is None or tx.block is None:
                return TxStatus(kind="not_found", tx_hash=tx_hash)
            self.mine(self.blocks_per_look, empty=True)  # the chain moves on while we wait
            depth = len(self._states) - tx.block
            need = confirmations if isinstance(confirmations, int) else 1
            status = 0 if tx.reverted else 1
            if depth < need:
                return TxStatus("pending", tx_hash, tx.block, depth, status)
            kind: Literal["confirmed", "reverted"] = "reverted" if tx.reverted else "confirmed"
            return TxStatus(kind, tx_hash, tx.block, depth, status, tx.revert_reason)

    def revert_reason(self, tx_hash: str) -> str | None:
        with self._lock:
            tx = self._mined.get(tx_hash)
            return tx.revert_reason if tx else None

    def contract(self, address: str, abi: Sequence[Mapping[str, Any]]) -> Contract:
        return super().contract(address, abi)
