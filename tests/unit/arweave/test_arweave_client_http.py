"""How the client reads gateway answers it cannot get from arlocal (202, 208, 5xx, timeouts).

A scripted httpx transport plays the gateway; arlocal's own answers are covered in
tests/integration/arweave.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

import statemachine_wf.adapters.arweave as arweave_adapter
from statemachine_wf.adapters.arweave import (
    ArStatus,
    ArweaveClient,
    ArweaveError,
    ArweaveWallet,
    GatewayUnavailable,
    InsufficientFunds,
    InvalidTransaction,
    TransactionNotFound,
    build_transaction,
)
from statemachine_wf.adapters.arweave.transaction import b64url_encode
from statemachine_wf.errors import WorkflowError

TX = "A" * 43
ANCHOR = b64url_encode(bytes(48))
Handler = Callable[[httpx.Request], httpx.Response]


@pytest.fixture(scope="module")
def wallet() -> ArweaveWallet:
    return ArweaveWallet.generate()


def client_for(handler: Handler, wallet: ArweaveWallet | None = None, **kw: int) -> ArweaveClient:
    return ArweaveClient(
        "http://gateway.test", wallet, transport=httpx.MockTransport(handler), **kw
    )


def routes(table: dict[tuple[str, str], httpx.Response], seen: list[str] | None = None) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        key = (request.method, request.url.path)
        if seen is not None:
            seen.append(f"{request.method} {request.url.path}")
        if key not in table:
            return httpx.Response(404, text="Not Found")
        return table[key]

    return handler


def test_public_api_is_pinned() -> None:
    assert sorted(arweave_adapter.__all__) == sorted(
        [
            "DEFAULT_INLINE_LIMIT",
            "WALLET_ENV_VAR",
            "ArLocalNode",
            "ArStatus",
            "ArweaveClient",
            "ArweaveError",
            "ArweaveWallet",
            "GatewayUnavailable",
            "InsufficientFunds",
            "InvalidTransaction",
            "PreparedTx",
            "StatusKind",
            "TransactionNotFound",
            "UploadResult",
            "WalletError",
            "build_transaction",
            "compute_data_root",
            "generate_transaction_chunks",
            "start_arlocal",
        ]
    )
    for name in arweave_adapter.__all__:
        assert hasattr(arweave_adapter, name)


def test_error_tree_and_retryability() -> None:
    assert issubclass(ArweaveError, WorkflowError)
    assert InsufficientFunds.retryable is True
    assert GatewayUnavailable.retryable is True
    assert TransactionNotFound.retryable is True
    assert InvalidTransaction.retryable is False
    err = InvalidTransaction("post tx: rejected", status_code=400, body="x" * 1000, tx_id=TX)
    assert (err.status_code, err.tx_id) == (400, TX)
    assert err.body == "x" * 300
    assert "HTTP 400" in str(err)
    assert TX in str(err)


def test_an_error_without_a_message_says_its_docstrings_first_paragraph() -> None:
    """As the core's errors do: the whole first paragraph on one line, never its first
    line alone (a wrapped first sentence was cut) nor the rest of the docstring."""

    class Wrapped(ArweaveError):
        """The gateway refused the transaction because its anchor is older than the
        last fifty blocks.

        Attributes: none beyond ArweaveError's.
        """

    sentence = (
        "The gateway refused the transaction because its anchor is older than the"
        " last fifty blocks."
    )
    assert str(Wrapped()) == sentence
    assert str(Wrapped(status_code=400, tx_id=TX)) == f"{sentence} (tx {TX}, HTTP 400)"
    assert str(ArweaveError()) == "The Arweave gateway or wallet failed."
    assert str(InsufficientFunds()) == (
        "The wallet does not have enough AR to pay for the transaction."
    )

    class Bare(ArweaveError):
        pass

    assert str(Bare()) == "Bare"
    assert str(Wrapped("given\n\nas is")) == "given\n\nas is"


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (httpx.Response(202, text="Pending"), ArStatus("pending")),
        (httpx.Response(200, text="Pending"), ArStatus("pending")),
        (httpx.Response(404, text="Not Found"), ArStatus("not_found")),
        (httpx.Response(410, text="Gone"), ArStatus("not_found")),
        (
            httpx.Response(
                200,
                json={
                    "block_height": 7,
                    "block_indep_hash": "h" * 64,
                    "number_of_confirmations": 3,
                },
            ),
            ArStatus("confirmed", confirmations=3, block_height=7, block_hash="h" * 64),
        ),
    ],
)
def test_status_answers(response: httpx.Response, expected: ArStatus) -> None:
    with client_for(routes({("GET", f"/tx/{TX}/status"): response})) as client:
        assert client.status(TX) == expected


@pytest.mark.parametrize("code", [429, 500, 502, 503])
def test_status_gateway_errors_are_retryable(code: int) -> None:
    with (
        client_for(routes({("GET", f"/tx/{TX}/status"): httpx.Response(code)})) as client,
        pytest.raises(GatewayUnavailable) as info,
    ):
        client.status(TX)
    assert info.value.retryable
    assert info.value.status_code == code


def test_status_garbage_is_not_taken_for_confirmed() -> None:
    answer = httpx.Response(200, text="<html>hello</html>")
    with (
        client_for(routes({("GET", f"/tx/{TX}/status"): answer})) as client,
        pytest.raises(GatewayUnavailable, match="unexpected answer"),
    ):
        client.status(TX)


def test_malformed_id_is_refused_without_a_request() -> None:
    seen: list[str] = []
    with (
        client_for(routes({}, seen)) as client,
        pytest.raises(InvalidTransaction, match="not an Arweave transaction id"),
    ):
        client.status("../../wallet")
    assert seen == []


def prepared(wallet: ArweaveWallet, data: bytes = b"payload") -> arweave_adapter.PreparedTx:
    return build_transaction(wallet, data, {"a": "b"}, anchor=ANCHOR, reward=10)


@pytest.mark.parametrize(
    ("response", "error", "retryable"),
    [
        (
            httpx.Response(410, json={"code": 410, "msg": "You don't have enough tokens"}),
            InsufficientFunds,
            True,
        ),
        (httpx.Response(402, text="Payment required"), InsufficientFunds, True),
        (httpx.Response(400, text="Invalid data_root."), InvalidTransaction, False),
        (httpx.Response(503, text="busy"), GatewayUnavailable, True),
        (httpx.Response(429, text="slow down"), GatewayUnavailable, True),
    ],
)
def test_post_errors_are_raised_not_swallowed(
    wallet: ArweaveWallet, response: httpx.Response, error: type[ArweaveError], retryable: bool
) -> None:
    tx = prepared(wallet)
    table = {("POST", "/tx"): response, ("GET", f"/tx/{tx.tx_id}/status"): httpx.Response(404)}
    with client_for(routes(table)) as client, pytest.raises(error) as info:
        client.post(tx)
    assert info.value.retryable is retryable
    assert info.value.tx_id == tx.tx_id


@pytest.mark.parametrize(
    ("post_answer", "status_answer"),
    [
        (httpx.Response(208, text="Transaction already processed."), None),
        (httpx.Response(400, text="Transaction already processed."), httpx.Response(202)),
        (httpx.Response(410, text="no tokens left"), httpx.Response(200, text="Pending")),
        (httpx.Response(500, text="oops"), httpx.Response(202)),
    ],
)
def test_reposting_a_known_tx_is_success(
    wallet: ArweaveWallet, post_answer: httpx.Response, status_answer: httpx.Response | None
) -> None:
    tx = prepared(wallet)
    table = {("POST", "/tx"): post_answer}
    if status_answer is not None:
        table[("GET", f"/tx/{tx.tx_id}/status")] = status_answer
    with client_for(routes(table)) as client:
        result = client.post(tx)
    assert result.already_posted is True
    assert (result.tx_id, result.data_root, result.size) == (tx.tx_id, tx.data_root, 7)


def test_large_data_goes_header_then_chunks(wallet: ArweaveWallet) -> None:
    data = bytes(range(256)) * 2048  # 512 KiB: two full chunks
    tx = prepared(wallet, data)
    bodies: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append({"path": request.url.path, **json.loads(request.content)})
        return httpx.Response(200, text="OK")

    with client_for(handler, inline_limit=1000) as client:
        result = client.post(tx)
    assert result.already_posted is False
    assert [b["path"] for b in bodies] == ["/tx", "/chunk", "/chunk"]
    assert bodies[0]["data"] == ""
    assert bodies[0]["data_root"] == tx.data_root
    assert [b["offset"] for b in bodies[1:]] == ["262143", "524287"]
    assert all(b["data_root"] == tx.data_root and b["data_size"] == "524288" for b in bodies[1:])


def test_rejected_chunk_is_an_error(wallet: ArweaveWallet) -> None:
    tx = prepared(wallet, bytes(300_000))
    table = {
        ("POST", "/tx"): httpx.Response(200),
        ("POST", "/chunk"): httpx.Response(400, text="invalid_proof"),
    }
    with (
        client_for(routes(table), inline_limit=0) as client,
        pytest.raises(InvalidTransaction, match="post chunk at offset"),
    ):
        client.post(tx)


def test_get_data_checks_the_data_root(wallet: ArweaveWallet) -> None:
    tx = prepared(wallet, b"the real evidence")
    header = tx.to_record()
    table = {
        ("GET", f"/tx/{tx.tx_id}"): httpx.Response(200, json=header),
        ("GET", f"/{tx.tx_id}"): httpx.Response(200, content=b"the fake evidence"),
    }
    with client_for(routes(table)) as client:
        with pytest.raises(ArweaveError, match="do not match"):
            client.get_data(tx.tx_id)
        assert client.get_data(tx.tx_id, verify=False) == b"the fake evidence"


def test_get_data_of_unknown_or_pending_tx(wallet: ArweaveWallet) -> None:
    with client_for(routes({})) as client, pytest.raises(TransactionNotFound):
        client.get_data(TX)
    with (
        client_for(routes({("GET", f"/tx/{TX}"): httpx.Response(202, text="Pending")})) as client,
        pytest.raises(TransactionNotFound, match="pending"),
    ):
        client.get_data(TX)


def test_reads_without_wallet_and_writes_need_one() -> None:
    table = {("GET", "/wallet/" + TX + "/balance"): httpx.Response(200, text="1234")}
    with client_for(routes(table)) as client:
        assert client.balance(TX) == 1234
        with pytest.raises(ArweaveError, match="no wallet"):
            client.prepare(b"x")


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A socket that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


def test_a_gateway_that_never_answers_times_out(silent_server: int) -> None:
    started = time.monotonic()
    with (
        ArweaveClient(f"http://127.0.0.1:{silent_server}", timeout=0.3) as client,
        pytest.raises(GatewayUnavailable, match="Timeout") as info,
    ):
        client.status(TX)
    assert time.monotonic() - started < 3
    assert info.value.retryable


ANCHOR = "b" * 64


@pytest.mark.parametrize(("block", "head", "too_old"), [(10, 59, False), (10, 60, True)])
def test_anchor_too_old_compares_the_anchor_block_with_the_head(
    block: int, head: int, too_old: bool
) -> None:
    # Accepted while one of the last 50 blocks (heads 10..59 for a block at 10).
    client = client_for(
        routes(
            {
                ("GET", f"/block/hash/{ANCHOR}"): httpx.Response(200, json={"height": block}),
                ("GET", "/info"): httpx.Response(200, json={"height": head}),
            }
        )
    )
    assert client.anchor_too_old(ANCHOR) is too_old


def test_anchor_too_old_is_false_for_an_anchor_that_is_not_a_known_block() -> None:
    seen: list[str] = []
    client = client_for(routes({}, seen))  # every path 404
    assert client.anchor_too_old(ANCHOR) is False  # e.g. a wallet's last transaction id
    assert client.anchor_too_old("") is False
    assert client.anchor_too_old("../info") is False  # never sent as a path
    assert seen == [f"GET /block/hash/{ANCHOR}"]


def test_anchor_too_old_raises_when_the_gateway_cannot_say() -> None:
    client = client_for(
        routes(
            {
                ("GET", f"/block/hash/{ANCHOR}"): httpx.Response(200, json={"height": 1}),
                ("GET", "/info"): httpx.Response(503, text="busy"),
            }
        )
    )
    with pytest.raises(GatewayUnavailable):
        client.anchor_too_old(ANCHOR)
