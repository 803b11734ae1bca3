"""classify() maps every driver error the adapter can meet to the ChainError tree."""

from __future__ import annotations

import urllib.error
from typing import Any

import aiohttp
import pytest
import requests
from eth_abi.abi import encode
from eth_tester.exceptions import TransactionFailed
from eth_utils.exceptions import ValidationError
from web3.exceptions import (
    ContractLogicError,
    ProviderConnectionError,
    RequestTimedOut,
    TooManyRequests,
    Web3RPCError,
)

from statemachine_wf.adapters.ethereum.errors import (
    AlreadyKnown,
    ChainError,
    ConfirmationTimeout,
    FeeCapTooLow,
    InsufficientFunds,
    NonceTooLow,
    ReplacementUnderpriced,
    Reverted,
    RpcUnavailable,
    SignerError,
    chain_errors,
    classify,
    decode_revert_data,
)
from statemachine_wf.errors import WorkflowError


def rpc_error(message: str, code: int = -32003, data: str | None = None) -> Web3RPCError:
    error: dict[str, object] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    response: Any = {"jsonrpc": "2.0", "id": 1, "error": error}
    return Web3RPCError(str(error), rpc_response=response)


def error_string(reason: str) -> str:
    return "0x08c379a0" + encode(["string"], [reason]).hex()


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # anvil (-32003)
        ("nonce too low", NonceTooLow),
        ("transaction already imported", AlreadyKnown),
        ("replacement transaction underpriced", ReplacementUnderpriced),
        ("Insufficient funds for gas * price + value", InsufficientFunds),
        ("max fee per gas less than block base fee", FeeCapTooLow),
        # geth (-32000)
        ("nonce too low: next nonce 5, tx nonce 3", NonceTooLow),
        ("already known", AlreadyKnown),
        ("fee cap less than block base fee: address 0xf39f, gasFeeCap: 1 baseFee: 7", FeeCapTooLow),
        ("insufficient funds for gas * price + value: balance 0, tx cost 21000", InsufficientFunds),
        # hosted RPC rate limits
        ("daily request count limit exceeded", RpcUnavailable),
        ("something the map does not know", ChainError),
    ],
)
def test_rpc_messages_map_to_the_tree(message: str, expected: type[ChainError]) -> None:
    error = classify(rpc_error(message))
    assert type(error) is expected
    assert message in str(error)


def test_rpc_http_429_is_unavailable() -> None:
    assert type(classify(rpc_error("slow down", code=429))) is RpcUnavailable


def test_rpc_revert_with_data_in_the_error_decodes_the_reason() -> None:
    error = classify(rpc_error("execution reverted", code=3, data=error_string("epoch closed")))
    assert isinstance(error, Reverted)
    assert error.reason == "epoch closed"


def test_contract_logic_error_gives_reverted_with_reason_and_data() -> None:
    data = error_string("already submitted")
    error = classify(ContractLogicError("execution reverted: already submitted", data))
    assert isinstance(error, Reverted)
    assert error.reason == "already submitted"
    assert error.data == data
    assert str(error) == "execution reverted: already submitted"
    assert not error.retryable


def test_contract_logic_error_without_data_uses_the_message() -> None:
    error = classify(ContractLogicError("execution reverted: unknown work"))
    assert isinstance(error, Reverted)
    assert error.reason == "unknown work"


def test_py_evm_revert_and_validation_errors() -> None:
    reverted = classify(TransactionFailed("execution reverted: epoch closed"))
    assert isinstance(reverted, Reverted)
    assert reverted.reason == "epoch closed"
    assert isinstance(
        classify(ValidationError("Invalid transaction nonce: Expected 3, but got 0")), NonceTooLow
    )
    # py-evm has no queue: a future nonce is refused, but it is not "too low".
    future = classify(ValidationError("Invalid transaction nonce: Expected 3, but got 7"))
    assert type(future) is ChainError
    assert isinstance(
        classify(ValidationError("Sender b'..' cannot afford txn gas 3000 with account balance 0")),
        InsufficientFunds,
    )


@pytest.mark.parametrize(
    "exc",
    [
        requests.exceptions.ConnectionError("Connection refused"),
        requests.exceptions.ReadTimeout("read timed out"),
        aiohttp.ServerTimeoutError("timeout"),
        aiohttp.ClientConnectionError("refused"),
        urllib.error.URLError("refused"),
        ConnectionRefusedError(111, "Connection refused"),
        TimeoutError("timed out"),
        requests.exceptions.ConnectTimeout("connect timed out"),
        ProviderConnectionError("down"),
        RequestTimedOut("slow"),
        TooManyRequests("429"),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_transport_errors_are_rpc_unavailable(exc: BaseException) -> None:
    error = classify(exc)
    assert type(error) is RpcUnavailable
    assert error.retryable


def test_unknown_exception_is_a_plain_chain_error() -> None:
    error = classify(KeyError("weird"))
    assert type(error) is ChainError
    assert "KeyError" in str(error)
    assert not error.retryable


def test_retryable_flags_and_root() -> None:
    retryable = {
        NonceTooLow,
        AlreadyKnown,
        ReplacementUnderpriced,
        RpcUnavailable,
        ConfirmationTimeout,
    }
    everything: list[type[ChainError]] = [
        *retryable,
        InsufficientFunds,
        Reverted,
        SignerError,
        ChainError,
    ]
    for cls in everything:
        assert issubclass(cls, WorkflowError)
        assert cls.retryable is (cls in retryable), cls


def test_classify_returns_chain_errors_unchanged() -> None:
    error = NonceTooLow()
    assert classify(error) is error
    assert str(error) == "The nonce was already used by a mined transaction of this sender."


def test_chain_errors_context_manager_chains_the_cause() -> None:
    original = rpc_error("nonce too low")
    with pytest.raises(NonceTooLow) as caught, chain_errors():
        raise original
    assert caught.value.__cause__ is original


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (error_string("already submitted"), "already submitted"),
        ("0x4e487b71" + encode(["uint256"], [0x11]).hex(), "panic 0x11"),
        ("0xdeadbeef", "0xdeadbeef"),  # a custom error: its selector, undecoded
        ("0x08c379a0ff", "0x08c379a0ff"),  # malformed payload
        ("0x", None),
        (None, None),
    ],
)
def test_decode_revert_data(data: str | None, reason: str | None) -> None:
    assert decode_revert_data(data) == reason
