"""The wallet loads from files and env vars, signs correctly, and never shows its key."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import pickle
import stat
import traceback
from pathlib import Path

import pytest
from Crypto.Hash import SHA256
from Crypto.PublicKey import RSA
from Crypto.Signature import pss

from statemachine_wf.adapters.arweave import ArweaveWallet, WalletError
from statemachine_wf.adapters.arweave.wallet import WALLET_ENV_VAR
from statemachine_wf.errors import WorkflowError

PRIVATE_FIELDS = ("d", "p", "q", "dp", "dq", "qi")


def _b64d(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def secrets_of(wallet: ArweaveWallet) -> list[str]:
    """The private JWK fields, plus a few slices of them (a key might be cut)."""
    jwk = wallet.export_jwk()
    values = [str(jwk[f]) for f in PRIVATE_FIELDS]
    return values + [v[:24] for v in values] + [v[-24:] for v in values]


def assert_no_secret(text: str, wallet: ArweaveWallet) -> None:
    for secret in secrets_of(wallet):
        assert secret not in text


@pytest.fixture(scope="module")
def wallet() -> ArweaveWallet:
    # 4096 bits like a real wallet; generated once for the module.
    return ArweaveWallet.generate()


def test_generated_wallet_is_a_4096_bit_rsa_jwk(wallet: ArweaveWallet) -> None:
    jwk = wallet.export_jwk()
    assert jwk["kty"] == "RSA"
    assert jwk["e"] == "AQAB"
    assert len(_b64d(jwk["n"])) == 512
    assert wallet.owner == jwk["n"]
    expected = base64.urlsafe_b64encode(hashlib.sha256(_b64d(jwk["n"])).digest()).rstrip(b"=")
    assert wallet.address == expected.decode()
    assert len(wallet.address) == 43


def test_signature_is_rsa_pss_sha256_and_verifies(wallet: ArweaveWallet) -> None:
    jwk = wallet.export_jwk()
    public = RSA.construct((int.from_bytes(_b64d(jwk["n"]), "big"), 65537))
    message = b"evidence"
    signature = wallet.sign(message)
    assert len(signature) == 512
    pss.new(public).verify(SHA256.new(message), signature)
    with pytest.raises(ValueError, match="Incorrect signature"):
        pss.new(public).verify(SHA256.new(b"other"), signature)


def test_repr_str_and_pickle_do_not_expose_the_key(wallet: ArweaveWallet) -> None:
    for text in (repr(wallet), str(wallet), f"{wallet}", f"{wallet!r}"):
        assert wallet.address in text
        assert_no_secret(text, wallet)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(wallet)


def test_load_from_file_and_env(
    wallet: ArweaveWallet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "wallet.json"
    wallet.save(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert ArweaveWallet.from_file(path).address == wallet.address

    monkeypatch.setenv(WALLET_ENV_VAR, str(path))
    assert ArweaveWallet.from_env().address == wallet.address
    monkeypatch.setenv(WALLET_ENV_VAR, "  " + json.dumps(wallet.export_jwk()) + "\n")
    assert ArweaveWallet.from_env().address == wallet.address

    monkeypatch.delenv(WALLET_ENV_VAR)
    with pytest.raises(WalletError, match=f"{WALLET_ENV_VAR} is not set"):
        ArweaveWallet.from_env()
    with pytest.raises(WalletError, match="cannot read the wallet file"):
        ArweaveWallet.from_file(tmp_path / "missing.json")


def _broken_variants(wallet: ArweaveWallet) -> list[str]:
    jwk = wallet.export_jwk()
    text = json.dumps(jwk)
    return [
        text[:-5],  # truncated JSON
        text.replace('"kty": "RSA"', '"kty": "EC"'),
        json.dumps({k: v for k, v in jwk.items() if k != "qi"}),
        json.dumps({**jwk, "n": "!!not-base64!!" + jwk["d"]}),
        json.dumps({**jwk, "p": jwk["q"]}),  # inconsistent key: p * q != n
        json.dumps([jwk]),
    ]


def test_loading_errors_carry_no_key_material(
    wallet: ArweaveWallet,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    for i, broken in enumerate(_broken_variants(wallet)):
        attempts = []
        path = tmp_path / f"{i}.json"
        path.write_text(broken)
        monkeypatch.setenv(WALLET_ENV_VAR, broken)
        for load in (
            lambda b=broken: ArweaveWallet.from_json(b),
            lambda p=path: ArweaveWallet.from_file(p),
            ArweaveWallet.from_env,
        ):
            with pytest.raises(WalletError) as info:
                load()
            attempts.append(info.value)
        for exc in attempts:
            assert isinstance(exc, WorkflowError)
            assert exc.retryable is False
            # No chained exception may hold the document either.
            assert exc.__cause__ is None
            assert exc.__context__ is None
            formatted = "".join(traceback.format_exception(exc))
            assert_no_secret(formatted, wallet)
            assert_no_secret(repr(exc.args), wallet)
    assert_no_secret("\n".join(r.getMessage() for r in caplog.records), wallet)
