"""LocalSigner: signs correctly and never lets the private key out."""

from __future__ import annotations

import json
import logging
import pickle
from pathlib import Path
from typing import Any

import pytest
from eth_account import Account
from eth_typing import HexStr
from eth_utils.crypto import keccak

from statemachine_wf.adapters.ethereum import LocalSigner, SignedTx, Signer, SignerError

KEY = "0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318"
KEY_HEX = KEY.removeprefix("0x")
ADDRESS = Account.from_key(KEY).address

TX: dict[str, Any] = {
    "type": 2,
    "chainId": 31337,
    "nonce": 7,
    "to": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    "value": 1,
    "data": "0x",
    "gas": 21000,
    "maxFeePerGas": 2_000_000_000,
    "maxPriorityFeePerGas": 1_000_000_000,
}


def assert_no_key(*texts: str) -> None:
    for text in texts:
        assert KEY_HEX.lower() not in text.lower()


def test_from_env_signs_and_hash_is_keccak_of_raw(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWF_ETH_PRIVATE_KEY", KEY)
    signer = LocalSigner.from_env()
    assert isinstance(signer, Signer)
    assert signer.address == ADDRESS
    signed = signer.sign_transaction({**TX, "from": ADDRESS})
    assert isinstance(signed, SignedTx)
    assert signed.nonce == 7
    assert signed.tx_hash == "0x" + keccak(signed.raw).hex()
    assert signed.raw_hex.startswith("0x02")  # EIP-1559 envelope
    # Deterministic: re-signing after a crash yields the same bytes and hash.
    assert signer.sign_transaction(TX) == signed
    assert Account.recover_transaction(signed.raw_hex) == ADDRESS


def test_from_env_missing_and_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWF_TEST_KEY", raising=False)
    with pytest.raises(SignerError, match="SWF_TEST_KEY is not set"):
        LocalSigner.from_env("SWF_TEST_KEY")
    bad = KEY[:-2]  # 31 bytes: invalid, and must not be echoed
    monkeypatch.setenv("SWF_TEST_KEY", bad)
    with pytest.raises(SignerError, match="does not hold a valid key") as caught:
        LocalSigner.from_env("SWF_TEST_KEY")
    assert bad.removeprefix("0x") not in str(caught.value)
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None or bad not in str(caught.value.__context__)


def test_from_keystore(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # pbkdf2 with few iterations keeps the test fast; real keystores use scrypt.
    keyfile = Account.encrypt(HexStr(KEY), "s3cret", kdf="pbkdf2", iterations=2)
    path = tmp_path / "key.json"
    path.write_text(json.dumps(keyfile))
    monkeypatch.setenv("SWF_ETH_KEYSTORE_PASSWORD", "s3cret")
    assert LocalSigner.from_keystore(path).address == ADDRESS

    monkeypatch.setenv("SWF_ETH_KEYSTORE_PASSWORD", "wrong")
    with pytest.raises(SignerError, match="cannot decrypt keystore"):
        LocalSigner.from_keystore(path)
    monkeypatch.delenv("SWF_ETH_KEYSTORE_PASSWORD")
    with pytest.raises(SignerError, match="SWF_ETH_KEYSTORE_PASSWORD is not set"):
        LocalSigner.from_keystore(path)
    monkeypatch.setenv("PW", "s3cret")
    with pytest.raises(SignerError, match="cannot read keystore"):
        LocalSigner.from_keystore(tmp_path / "missing.json", password_env="PW")


def test_the_key_is_in_no_repr_str_error_or_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    signer = LocalSigner.from_private_key(KEY)
    texts = [repr(signer), str(signer), f"{signer}", repr([signer])]
    assert repr(signer) == f"LocalSigner(address={ADDRESS!r})"

    failures: list[BaseException] = []
    bad_txs: list[dict[str, Any]] = [
        {k: v for k, v in TX.items() if k != "gas"},  # incomplete
        {**TX, "value": -1},  # invalid
        {**TX, "data": "0xzz"},  # not hex
        {**TX, "note": KEY},  # a field that happens to hold the key itself
        {**TX, "from": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"},  # someone else's tx
    ]
    for tx in bad_txs:
        with pytest.raises(SignerError) as caught:
            signer.sign_transaction(tx)
        failures.append(caught.value)
    for error in failures:
        assert ADDRESS in str(error) or "this signer is" in str(error)
        texts += [str(error), repr(error), repr(error.args)]
        # Nothing chained that could carry the key in its own message.
        assert error.__cause__ is None
        assert error.__context__ is None or error.__suppress_context__
    texts += [record.getMessage() for record in caplog.records]
    texts += [repr(record.args) for record in caplog.records]
    assert caplog.records, "signing failures are logged (without the key)"
    assert_no_key(*texts)


def test_the_signer_refuses_to_be_pickled() -> None:
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(LocalSigner.from_private_key(KEY))


def test_the_key_attribute_is_not_public() -> None:
    signer = LocalSigner.from_private_key(KEY)
    public = {name for name in dir(signer) if not name.startswith("_")}
    assert public == {
        "address",
        "sign_transaction",
        "from_env",
        "from_keystore",
        "from_private_key",
    }
    assert not hasattr(signer, "__dict__")  # slots only: vars() cannot dump it
