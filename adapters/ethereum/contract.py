"""Compiled contract artifacts and a deploy helper."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eth_typing import ChecksumAddress

from .client import ConfirmationRule, EthereumClient
from .errors import ChainError, Reverted
from .signer import Signer

__all__ = ["ContractArtifact", "deploy"]


@dataclass(frozen=True, slots=True)
class ContractArtifact:
    """A compiled contract: ABI and creation bytecode.

    Attributes:
        name: The contract name.
        abi: The ABI (a list of JSON entries).
        bytecode: The creation bytecode, 0x-hex.
    """

    name: str
    abi: Sequence[Mapping[str, Any]]
    bytecode: str

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ContractArtifact:
        """Read an artifact JSON with ``contractName``, ``abi`` and ``bytecode`` keys.

        Raises:
            ValueError: A key is missing or the bytecode is empty.
        """
        document = json.loads(Path(path).read_text())
        bytecode = str(document.get("bytecode", ""))
        if not bytecode.removeprefix("0x") or "abi" not in document:
            raise ValueError(f"{path} is not a compiled artifact (abi and bytecode needed)")
        name = str(document.get("contractName") or Path(path).stem)
        return cls(name=name, abi=tuple(document["abi"]), bytecode=bytecode)


def deploy(
    client: EthereumClient,
    signer: Signer,
    abi: Sequence[Mapping[str, Any]],
    bytecode: str,
    *args: Any,
    confirmations: ConfirmationRule = 1,
    timeout: float = 30.0,
) -> ChecksumAddress:
    """Deploy a contract from ``signer`` and wait until it is confirmed.

    Args:
        client: The chain.
        signer: Pays for and signs the creation.
        abi: The contract ABI (for constructor arguments).
        bytecode: The creation bytecode, 0x-hex.
        *args: Constructor arguments.
        confirmations: The confirmation rule to wait for.
        timeout: Seconds to wait.

    Returns:
        The new contract's address.

    Raises:
        Reverted: The constructor reverted.
        ConfirmationTimeout: Not confirmed within ``timeout``.
    """
    factory = client.w3.eth.contract(abi=list(abi), bytecode=bytecode)
    data = factory.constructor(*args).data_in_transaction
    tx = client.build_transaction(sender=signer.address, to=None, data=data)
    signed = signer.sign_transaction(tx)
    client.send_raw(signed)
    status = client.wait(signed.tx_hash, confirmations=confirmations, timeout=timeout)
    if status.kind == "reverted":
        raise Reverted(status.revert_reason, tx_hash=status.tx_hash)
    if status.contract_address is None:  # a confirmed creation always has one
        raise ChainError(f"receipt of {status.tx_hash} has no contract address")
    return status.contract_address
