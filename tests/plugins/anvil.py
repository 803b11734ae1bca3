"""Pytest fixtures for Ethereum: anvil nodes, an in-process EVM, signers, the contract.

Fixtures on a real anvil (tests using them should be marked ``@pytest.mark.chain``):

* ``anvil`` - a fresh anvil (automine) on a free 127.0.0.1 port for one test, stopped
  by PID. Fresh per test because tests toggle automine, snapshot and revert.
* ``anvil_session`` - one anvil for the whole run; tests must not assume an empty chain.
* ``eth_client`` - an :class:`EthereumClient` on ``anvil`` (5 s request timeout).
* ``eth_signer`` / ``eth_signer2`` - signers for anvil's funded dev accounts 0 and 1.
* ``deployed_contract`` - ``ChaosChain`` deployed on ``anvil`` by ``eth_signer``.

Fixtures on the in-process py-evm (``EthereumTesterProvider``; no node, for unit tests):

* ``evm_client`` - an :class:`EthereumClient` on a fresh in-process chain.
* ``evm_signer`` / ``evm_signer2`` - :class:`LocalSigner` s funded with 1000 ETH there.
* ``evm_contract`` - ``ChaosChain`` deployed there by ``evm_signer``.

And ``chaoschain`` - the compiled artifact (ABI + bytecode), session-scoped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from web3 import EthereumTesterProvider, Web3
from web3.contract import Contract

from examples.contracts import chaoschain_artifact
from statemachine_wf.adapters.ethereum import (
    AnvilNode,
    ContractArtifact,
    EthereumClient,
    LocalSigner,
    deploy,
    start_anvil,
)

# Fixed, test-only keys for the in-process chain (py-evm's own accounts are unlocked
# node accounts; the adapter only ever signs locally, so tests fund these instead).
EVM_TEST_KEYS = ("0x" + "a1" * 32, "0x" + "b2" * 32)
EVM_FUNDING_WEI = 1000 * 10**18


@pytest.fixture(scope="session")
def chaoschain() -> ContractArtifact:
    """The compiled ChaosChain contract."""
    return chaoschain_artifact()


# --- anvil -------------------------------------------------------------------------------


@pytest.fixture
def anvil() -> Iterator[AnvilNode]:
    """A fresh automining anvil for one test."""
    node = start_anvil()
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="session")
def anvil_session() -> Iterator[AnvilNode]:
    """One anvil shared by the session."""
    node = start_anvil()
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture
def eth_client(anvil: AnvilNode) -> EthereumClient:
    """A client on ``anvil``."""
    return EthereumClient.from_url(anvil.url, timeout=5.0)


@pytest.fixture
def eth_signer(anvil: AnvilNode) -> LocalSigner:
    """anvil's funded dev account 0."""
    return LocalSigner.from_private_key(anvil.private_keys[0])


@pytest.fixture
def eth_signer2(anvil: AnvilNode) -> LocalSigner:
    """anvil's funded dev account 1."""
    return LocalSigner.from_private_key(anvil.private_keys[1])


@pytest.fixture
def deployed_contract(
    eth_client: EthereumClient, eth_signer: LocalSigner, chaoschain: ContractArtifact
) -> Contract:
    """ChaosChain deployed on ``anvil``."""
    address = deploy(eth_client, eth_signer, chaoschain.abi, chaoschain.bytecode)
    return eth_client.contract(address, chaoschain.abi)


# --- in-process py-evm -------------------------------------------------------------------


@pytest.fixture
def evm_client() -> EthereumClient:
    """A client on a fresh in-process chain; ``evm_signer*`` are funded on it."""
    w3 = Web3(EthereumTesterProvider())
    funder = w3.eth.accounts[0]
    for key in EVM_TEST_KEYS:
        to = LocalSigner.from_private_key(key).address
        tx: Any = {"from": funder, "to": to, "value": EVM_FUNDING_WEI}
        w3.eth.send_transaction(tx)
    return EthereumClient(w3)


@pytest.fixture
def evm_signer(evm_client: EthereumClient) -> LocalSigner:
    """A funded signer on ``evm_client``."""
    return LocalSigner.from_private_key(EVM_TEST_KEYS[0])


@pytest.fixture
def evm_signer2(evm_client: EthereumClient) -> LocalSigner:
    """A second funded signer on ``evm_client``."""
    return LocalSigner.from_private_key(EVM_TEST_KEYS[1])


@pytest.fixture
def evm_contract(
    evm_client: EthereumClient, evm_signer: LocalSigner, chaoschain: ContractArtifact
) -> Contract:
    """ChaosChain deployed on ``evm_client``."""
    address = deploy(evm_client, evm_signer, chaoschain.abi, chaoschain.bytecode)
    return evm_client.contract(address, chaoschain.abi)
