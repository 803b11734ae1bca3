"""``examples.chaoschain:dependencies``: the ``--deps`` factory reads the environment.

No node is asked anything here; the worker test in tests/integration/chain runs it
against anvil and arlocal.
"""

from __future__ import annotations

import json

import pytest

from examples.chaoschain import ChaosChainSettings, dependencies
from examples.chaoschain.deps import ENV_VARS
from statemachine_wf import InputError
from statemachine_wf.adapters.arweave import ArweaveClient, ArweaveWallet
from statemachine_wf.adapters.ethereum import EthereumClient, LocalSigner
from statemachine_wf.adapters.ethereum.txqueue import DEFAULT_CONFIRMATIONS

KEY_A = "0x" + "a1" * 32
KEY_B = "0x" + "b2" * 32
CONTRACT = "0x" + "12" * 20


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def full_env(clean_env: pytest.MonkeyPatch, arweave_wallet: ArweaveWallet) -> pytest.MonkeyPatch:
    clean_env.setenv("SWF_ETH_RPC_URL", "http://127.0.0.1:1")
    clean_env.setenv("SWF_CHAOSCHAIN_ADDRESS", CONTRACT)
    clean_env.setenv("SWF_ETH_PRIVATE_KEY", f"{KEY_A}, {KEY_B}")
    clean_env.setenv("SWF_ARWEAVE_URL", "http://127.0.0.1:2")
    clean_env.setenv("SWF_ARWEAVE_WALLET", json.dumps(arweave_wallet.export_jwk()))
    return clean_env


def test_every_dependency_comes_from_the_environment(
    full_env: pytest.MonkeyPatch, arweave_wallet: ArweaveWallet
) -> None:
    deps = dependencies()
    assert set(deps) == {"eth", "arweave", "signers", "chaoschain"}
    assert isinstance(deps["eth"], EthereumClient)
    assert isinstance(deps["arweave"], ArweaveClient)
    assert deps["arweave"].gateway_url == "http://127.0.0.1:2"
    assert deps["arweave"].wallet is not None
    assert deps["arweave"].wallet.address == arweave_wallet.address
    deps["arweave"].close()
    expected = {LocalSigner.from_private_key(k).address.lower() for k in (KEY_A, KEY_B)}
    assert set(deps["signers"]) == expected
    settings = deps["chaoschain"]
    assert isinstance(settings, ChaosChainSettings)
    assert settings.contract_address == CONTRACT
    assert settings.confirmations == DEFAULT_CONFIRMATIONS
    assert settings.poll_interval == 1.0


def test_confirmations_and_poll_interval_are_optional_settings(
    full_env: pytest.MonkeyPatch,
) -> None:
    full_env.setenv("SWF_CHAOSCHAIN_CONFIRMATIONS", "finalized")
    full_env.setenv("SWF_CHAOSCHAIN_POLL_INTERVAL", "0.25")
    deps = dependencies()
    deps["arweave"].close()
    assert deps["chaoschain"].confirmations == "finalized"
    assert deps["chaoschain"].poll_interval == 0.25
    full_env.setenv("SWF_CHAOSCHAIN_CONFIRMATIONS", "3")
    deps = dependencies()
    deps["arweave"].close()
    assert deps["chaoschain"].confirmations == 3


def test_an_empty_environment_names_every_missing_variable(clean_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError) as info:
        dependencies()
    message = str(info.value)
    for name in (
        "SWF_ETH_RPC_URL",
        "SWF_CHAOSCHAIN_ADDRESS",
        "SWF_ETH_PRIVATE_KEY",
        "SWF_ETH_KEYSTORE",
        "SWF_ARWEAVE_URL",
        "SWF_ARWEAVE_WALLET",
    ):
        assert name in message
    assert "/mint/" in message  # how to fund an arlocal wallet


def test_bad_values_are_named_and_never_echoed(full_env: pytest.MonkeyPatch) -> None:
    bad_key = "0x" + "zz" * 32
    full_env.setenv("SWF_ETH_PRIVATE_KEY", f"{KEY_A},{bad_key}")
    full_env.setenv("SWF_CHAOSCHAIN_ADDRESS", KEY_B)  # a key pasted into the wrong variable
    full_env.setenv("SWF_ARWEAVE_WALLET", '{"kty": "RSA", "n": "secret-ish"}')
    full_env.setenv("SWF_CHAOSCHAIN_CONFIRMATIONS", "0")
    full_env.setenv("SWF_CHAOSCHAIN_POLL_INTERVAL", "soon")
    with pytest.raises(InputError) as info:
        dependencies()
    message = str(info.value)
    assert "SWF_ETH_PRIVATE_KEY: key #2 is not a valid private key" in message
    assert "SWF_CHAOSCHAIN_ADDRESS is not an address" in message
    assert "SWF_ARWEAVE_WALLET" in message
    assert "SWF_CHAOSCHAIN_CONFIRMATIONS" in message
    assert "SWF_CHAOSCHAIN_POLL_INTERVAL" in message
    for secret in (bad_key, bad_key[2:], KEY_A[2:], KEY_B[2:], "secret-ish"):
        assert secret not in message
