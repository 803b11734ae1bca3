"""The ChaosChain workflows' dependencies, read from the environment: a ``--deps`` factory.

Run the three workflows in a worker process::

    statemachine-wf -m examples.chaoschain.workflows worker \\
        --deps examples.chaoschain:dependencies

==============================  ===================================================
variable                        what
==============================  ===================================================
``SWF_ETH_RPC_URL``             the Ethereum node's JSON-RPC URL (HTTP); required
``SWF_CHAOSCHAIN_ADDRESS``      the deployed ChaosChain contract; required
``SWF_ETH_PRIVATE_KEY``         the signers' private keys, 0x-hex, comma-separated
``SWF_ETH_KEYSTORE``            or keystore files, comma-separated, unlocked with
                                ``SWF_ETH_KEYSTORE_PASSWORD`` (one of the two is required)
``SWF_ARWEAVE_URL``             the Arweave gateway; required
``SWF_ARWEAVE_WALLET``          the Arweave wallet: JWK JSON or a JWK file's path; required
``SWF_CHAOSCHAIN_CONFIRMATIONS``  ``N``, ``safe`` or ``finalized`` (default 2)
``SWF_CHAOSCHAIN_POLL_INTERVAL``  seconds between checks of a pending transaction (1)
==============================  ===================================================

A workflow's ``signer_address`` must be one of the loaded signers (else it fails with
``unknown_signer``). Every problem is reported at once in one
:class:`~statemachine_wf.InputError`, which the CLI prints before the worker starts; a
value is never echoed (a key pasted into the wrong variable must not reach a log), only
the variable and, for keys, the key's position in it. Nothing is asked of
the nodes here: an unreachable node or an unfunded wallet is met by the workflows'
failure table (retried, or STALLED for lack of funds). An arlocal wallet starts empty:
fund it with ``GET <gateway>/mint/<address>/<winston>``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from eth_utils.address import is_address

from statemachine_wf import InputError
from statemachine_wf.adapters.arweave import ArweaveClient, ArweaveWallet, WalletError
from statemachine_wf.adapters.ethereum import (
    ConfirmationRule,
    EthereumClient,
    LocalSigner,
    Signer,
    SignerError,
)
from statemachine_wf.adapters.ethereum.txqueue import DEFAULT_CONFIRMATIONS

from .workflows import ChaosChainSettings

__all__ = ["ENV_VARS", "dependencies"]

log = logging.getLogger(__name__)

ENV_VARS = (
    "SWF_ETH_RPC_URL",
    "SWF_CHAOSCHAIN_ADDRESS",
    "SWF_ETH_PRIVATE_KEY",
    "SWF_ETH_KEYSTORE",
    "SWF_ETH_KEYSTORE_PASSWORD",
    "SWF_ARWEAVE_URL",
    "SWF_ARWEAVE_WALLET",
    "SWF_CHAOSCHAIN_CONFIRMATIONS",
    "SWF_CHAOSCHAIN_POLL_INTERVAL",
)
"""Every variable :func:`dependencies` reads."""


def dependencies() -> dict[str, Any]:
    """``eth``, ``arweave``, ``signers`` and ``chaoschain``, from ``SWF_*`` variables.

    Raises:
        InputError: a variable is missing or malformed; the message lists every problem.
    """
    problems: list[str] = []

    def need(name: str, what: str) -> str:
        value = os.environ.get(name, "").strip()
        if not value:
            problems.append(f"{name} is not set ({what})")
        return value

    rpc_url = need(
        "SWF_ETH_RPC_URL", "the Ethereum node's JSON-RPC URL, e.g. http://127.0.0.1:8545"
    )
    address = need("SWF_CHAOSCHAIN_ADDRESS", "the deployed ChaosChain contract's address")
    if address and not is_address(address):
        # Not echoed: a key pasted into the wrong variable must not reach a log.
        problems.append("SWF_CHAOSCHAIN_ADDRESS is not an address (0x and 40 hex digits)")
    gateway = need("SWF_ARWEAVE_URL", "the Arweave gateway, e.g. http://127.0.0.1:1984")
    signers = _signers(problems)
    wallet = _wallet(problems)
    confirmations = _confirmations(problems)
    poll_interval = _poll_interval(problems)
    if problems or wallet is None:
        raise InputError(
            "the ChaosChain workers' environment is incomplete: " + "; ".join(problems)
        )
    log.info(
        "ChaosChain: contract %s on %s, signers %s, Arweave %s (wallet %s)",
        address,
        rpc_url,
        ", ".join(sorted(signers)),
        gateway,
        wallet.address,
    )
    return {
        "eth": EthereumClient.from_url(rpc_url, timeout=10.0),
        "arweave": ArweaveClient(gateway, wallet, timeout=30.0),
        "signers": signers,
        "chaoschain": ChaosChainSettings(
            contract_address=address,
            confirmations=confirmations,
            poll_interval=poll_interval,
        ),
    }


def _signers(problems: list[str]) -> dict[str, Signer]:
    """Address (lowercase) -> signer, from private keys and/or keystore files."""
    found: dict[str, Signer] = {}
    keys = _listed("SWF_ETH_PRIVATE_KEY")
    stores = _listed("SWF_ETH_KEYSTORE")
    if not keys and not stores:
        problems.append(
            "no signer: set SWF_ETH_PRIVATE_KEY (0x-hex private keys, comma-separated) or "
            "SWF_ETH_KEYSTORE (keystore files, comma-separated; password in "
            "SWF_ETH_KEYSTORE_PASSWORD)"
        )
    for n, key in enumerate(keys, start=1):
        try:
            signer: Signer = LocalSigner.from_private_key(key)
        except SignerError:  # its message names no key; ours names only the position
            problems.append(f"SWF_ETH_PRIVATE_KEY: key #{n} is not a valid private key")
            continue
        found[signer.address.lower()] = signer
    for path in stores:
        try:
            signer = LocalSigner.from_keystore(path, password_env="SWF_ETH_KEYSTORE_PASSWORD")
        except SignerError as exc:
            problems.append(f"SWF_ETH_KEYSTORE: {exc}")
            continue
        found[signer.address.lower()] = signer
    return found


def _wallet(problems: list[str]) -> ArweaveWallet | None:
    if not os.environ.get("SWF_ARWEAVE_WALLET", "").strip():
        problems.append(
            "SWF_ARWEAVE_WALLET is not set (the Arweave wallet: JWK JSON or the path of a "
            "JWK file; on arlocal fund it with GET <gateway>/mint/<address>/<winston>)"
        )
        return None
    try:
        return ArweaveWallet.from_env("SWF_ARWEAVE_WALLET")
    except WalletError as exc:  # never quotes the JWK
        problems.append(f"SWF_ARWEAVE_WALLET: {exc}")
        return None


def _confirmations(problems: list[str]) -> ConfirmationRule:
    value = os.environ.get("SWF_CHAOSCHAIN_CONFIRMATIONS", "").strip()
    if not value:
        return DEFAULT_CONFIRMATIONS
    if value == "safe":
        return "safe"
    if value == "finalized":
        return "finalized"
    if value.isdigit() and int(value) >= 1:
        return int(value)
    problems.append("SWF_CHAOSCHAIN_CONFIRMATIONS must be a depth >= 1, 'safe' or 'finalized'")
    return DEFAULT_CONFIRMATIONS


def _poll_interval(problems: list[str]) -> float:
    value = os.environ.get("SWF_CHAOSCHAIN_POLL_INTERVAL", "").strip()
    if not value:
        return 1.0
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        problems.append("SWF_CHAOSCHAIN_POLL_INTERVAL must be a number of seconds > 0")
        return 1.0
    return seconds


def _listed(name: str) -> list[str]:
    return [part.strip() for part in os.environ.get(name, "").split(",") if part.strip()]
