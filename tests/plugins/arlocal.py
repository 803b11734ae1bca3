"""Pytest fixtures for Arweave: arlocal nodes, wallets and clients.

Fixtures:

* ``arlocal`` - a fresh arlocal on a free 127.0.0.1 port for one test, stopped by PID.
* ``arlocal_session`` - one arlocal shared by the whole run (for heavy suites).
* ``arweave_wallet`` / ``unfunded_arweave_wallet`` - two generated 4096-bit wallets,
  made once per run (generation takes seconds).
* ``funded_arweave_wallet`` - ``arweave_wallet`` after minting it 1000 AR on ``arlocal``.
* ``arweave_client`` - an :class:`ArweaveClient` on ``arlocal`` signing with the funded wallet.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from statemachine_wf.adapters.arweave import (
    ArLocalNode,
    ArweaveClient,
    ArweaveWallet,
    start_arlocal,
)

# 1000 AR: enough for thousands of test uploads at arlocal's price (~65.6 M winston/kB).
FUNDING_WINSTON = 1000 * 10**12


@pytest.fixture
def arlocal() -> Iterator[ArLocalNode]:
    """A fresh arlocal for one test."""
    node = start_arlocal()
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="session")
def arlocal_session() -> Iterator[ArLocalNode]:
    """One arlocal for the whole session; tests must not assume an empty chain."""
    node = start_arlocal()
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="session")
def arweave_wallet() -> ArweaveWallet:
    """A generated wallet (unfunded until a test mints to it)."""
    return ArweaveWallet.generate()


@pytest.fixture(scope="session")
def unfunded_arweave_wallet() -> ArweaveWallet:
    """A second generated wallet that nothing funds."""
    return ArweaveWallet.generate()


@pytest.fixture
def funded_arweave_wallet(arlocal: ArLocalNode, arweave_wallet: ArweaveWallet) -> ArweaveWallet:
    """``arweave_wallet`` holding :data:`FUNDING_WINSTON` on ``arlocal``."""
    arlocal.mint(arweave_wallet.address, FUNDING_WINSTON)
    return arweave_wallet


@pytest.fixture
def arweave_client(
    arlocal: ArLocalNode, funded_arweave_wallet: ArweaveWallet
) -> Iterator[ArweaveClient]:
    """A client on ``arlocal`` that signs with the funded wallet."""
    with ArweaveClient(arlocal.url, funded_arweave_wallet, timeout=30.0) as client:
        yield client
