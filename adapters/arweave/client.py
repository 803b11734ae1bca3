"""An Arweave gateway client with timeouts, checked status codes and idempotent posts.

Everything that touches the network is our own httpx code. arweave-python-client
is used only for RSA-PSS signing and ``deep_hash`` (see :mod:`.transaction`):
its ``Transaction.send()`` swallows HTTP errors (an unfunded wallet's 410 passes
silently), its ``get_status()`` misreads pending and unknown transactions, it has
no timeouts, and it talks to the module global ``arweave.arweave_lib.API_URL``
instead of a gateway it is given.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

import httpx

from statemachine_wf.adapters.arweave.errors import (
    ArweaveError,
    GatewayUnavailable,
    InsufficientFunds,
    InvalidTransaction,
    TransactionNotFound,
)
from statemachine_wf.adapters.arweave.merkle import compute_data_root
from statemachine_wf.adapters.arweave.transaction import (
    PreparedTx,
    b64url_encode,
    build_transaction,
    is_tx_id,
)
from statemachine_wf.adapters.arweave.wallet import ArweaveWallet
from statemachine_wf.definition.redact import install_log_redaction, redact_text, redact_url

__all__ = [
    "ANCHOR_DEPTH",
    "DEFAULT_INLINE_LIMIT",
    "ArStatus",
    "ArweaveClient",
    "StatusKind",
    "UploadResult",
]

logger = logging.getLogger(__name__)

# Data up to this size goes inline in ``POST /tx``; larger data goes header first,
# then one ``POST /chunk`` per chunk. Gateways take inline data up to ~10 MiB,
# and arlocal serves inline data back more reliably than chunks (it de-duplicates
# chunks by content when it reassembles them, so repeated 256 KiB blocks vanish).
DEFAULT_INLINE_LIMIT = 8 * 1024 * 1024

# A block anchor (``last_tx``) is accepted while it is one of the last 50 blocks
# (Arweave's MAX_TX_ANCHOR_DEPTH; arlocal applies the same window).
ANCHOR_DEPTH = 50

_B64URL = re.compile(r"^[A-Za-z0-9_-]{1,128}$")

StatusKind = Literal["pending", "confirmed", "not_found"]


@dataclass(frozen=True, slots=True)
class ArStatus:
    """Where a transaction is, as the gateway sees it.

    Attributes:
        kind: ``pending`` (accepted, not mined), ``confirmed`` (in a block) or
            ``not_found`` (unknown, dropped or failed: safe to post a new one).
        confirmations: blocks on top of the including block (0 unless confirmed).
        block_height: the including block's height, when confirmed.
        block_hash: the including block's ``indep_hash``, when confirmed.
    """

    kind: StatusKind
    confirmations: int = 0
    block_height: int | None = None
    block_hash: str | None = None

    @property
    def confirmed(self) -> bool:
        """Whether the transaction is in a block."""
        return self.kind == "confirmed"


@dataclass(frozen=True, slots=True)
class UploadResult:
    """A posted transaction.

    Attributes:
        tx_id: the transaction id.
        data_root: the base64url merkle root of the data.
        size: the data size in bytes.
        already_posted: the gateway already had it (a re-post after a crash).
    """

    tx_id: str
    data_root: str
    size: int
    already_posted: bool = False


class ArweaveClient:
    """Talks to one Arweave gateway (a node, arweave.net or arlocal).

    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        gateway_url: str,
        wallet: ArweaveWallet | None = None,
        *,
        timeout: float = 30.0,
        inline_limit: int = DEFAULT_INLINE_LIMIT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """Create a client.

        Args:
            gateway_url: base URL, e.g. ``http://127.0.0.1:1984``.
            wallet: the signer for :meth:`prepare`/:meth:`upload`; reads need none.
            timeout: seconds for connecting and for each read/write of a request.
            inline_limit: largest data size posted inline; larger data is chunked.
            transport: an httpx transport (tests, proxies).
        """
        self.gateway_url = gateway_url.rstrip("/")
        install_log_redaction()  # httpx logs every request's full URL at INFO
        self.wallet = wallet
        self.inline_limit = inline_limit
        self._http = httpx.Client(
            base_url=self.gateway_url,
            timeout=httpx.Timeout(timeout),
            transport=transport,
            headers={"Accept": "application/json, text/plain;q=0.9, */*;q=0.5"},
        )

    def __repr__(self) -> str:
        return f"ArweaveClient({redact_url(self.gateway_url)!r}, wallet={self.wallet!r})"

    def close(self) -> None:
        """Close the HTTP connections."""
        self._http.close()

    def __enter__(self) -> ArweaveClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- low level ---------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            # Includes timeouts and refused connections. The request body is not part of
            # the message, and the gateway URL only as scheme://host:port: a key in its
            # userinfo, path or query stays out. The cause (httpx's text, with the URL)
            # is dropped for the same reason.
            error = GatewayUnavailable(
                f"{method} {redact_url(self.gateway_url)} {path.split('?', 1)[0]} failed: "
                f"{type(exc).__name__}: {redact_text(str(exc), self.gateway_url)}"
            )
        raise error from None

    @staticmethod
    def _error_for(
        resp: httpx.Response, what: str, tx_id: str | None = None, *, write: bool = False
    ) -> ArweaveError:
        code, text = resp.status_code, resp.text
        if code in (402, 410) or (code == 403 and "fund" in text.lower()):
            return InsufficientFunds(
                f"{what}: not enough funds", status_code=code, body=text, tx_id=tx_id
            )
        if code == 429 or code >= 500:
            return GatewayUnavailable(
                f"{what}: gateway error", status_code=code, body=text, tx_id=tx_id
            )
        if code == 404 and not write:
            return TransactionNotFound(
                f"{what}: not found", status_code=code, body=text, tx_id=tx_id
            )
        if 400 <= code < 500:
            return InvalidTransaction(f"{what}: rejected", status_code=code, body=text, tx_id=tx_id)
        return GatewayUnavailable(
            f"{what}: unexpected answer", status_code=code, body=text, tx_id=tx_id
        )

    def _get_text(self, path: str, what: str) -> str:
        resp = self._request("GET", path)
        if resp.status_code != 200:
            raise self._error_for(resp, what)
        return resp.text.strip()

    # -- reads -------------------------------------------------------------------

    def anchor(self) -> str:
        """Return a recent block hash to use as ``last_tx`` (``GET /tx_anchor``)."""
        return self._get_text("/tx_anchor", "tx_anchor")

    def price(self, size: int) -> int:
        """Return the fee in winston for storing ``size`` bytes (``GET /price/<size>``)."""
        text = self._get_text(f"/price/{int(size)}", "price")
        try:
            return int(text)
        except ValueError:
            raise GatewayUnavailable("price: not a number", body=text) from None

    def height(self) -> int:
        """Return the gateway's current block height (``GET /info``)."""
        text = self._get_text("/info", "info")
        try:
            return int(json.loads(text)["height"])
        except (ValueError, KeyError, TypeError):
            raise GatewayUnavailable("info: no height", body=text) from None

    def anchor_too_old(self, anchor: str) -> bool:
        """Whether the block anchor ``anchor`` has left the last :data:`ANCHOR_DEPTH` blocks.

        A gateway refuses a transaction so anchored, but not every gateway says why
        (arlocal answers a bare ``400 Bad Request``): this asks the block's height
        (``GET /block/hash/<anchor>``) and the current one. False when the anchor is not
        a block the gateway knows (an empty anchor, or a wallet's last transaction id).

        Raises:
            GatewayUnavailable: the gateway could not be asked.
        """
        if not _B64URL.match(anchor):
            return False
        resp = self._request("GET", f"/block/hash/{anchor}")
        if resp.status_code == 404:
            return False
        if resp.status_code != 200:
            raise self._error_for(resp, "block")
        try:
            block_height = int(resp.json()["height"])
        except (ValueError, KeyError, TypeError):
            raise GatewayUnavailable("block: no height", body=resp.text) from None
        return self.height() - block_height >= ANCHOR_DEPTH

    def balance(self, address: str | None = None) -> int:
        """Return a wallet's balance in winston.

        Args:
            address: the wallet address; the client's own wallet by default.
        """
        if address is None:
            address = self._own_wallet().address
        text = self._get_text(f"/wallet/{address}/balance", "balance")
        try:
            # arlocal answers an unknown address with an empty body.
            return int(text) if text else 0
        except ValueError:
            raise GatewayUnavailable("balance: not a number", body=text) from None

    def status(self, tx_id: str) -> ArStatus:
        """Return where ``tx_id`` is: pending, confirmed (with confirmations) or not found.

        Raises:
            InvalidTransaction: ``tx_id`` is not a transaction id.
            GatewayUnavailable: the gateway could not answer.
        """
        self._check_id(tx_id)
        resp = self._request("GET", f"/tx/{tx_id}/status")
        code = resp.status_code
        # 410 is a transaction the node saw fail; it will never be mined either.
        if code in (404, 410):
            return ArStatus("not_found")
        if code == 202:
            return ArStatus("pending")
        if code != 200:
            raise self._error_for(resp, "status", tx_id)
        text = resp.text.strip()
        # arlocal says 200 "Pending" where real gateways say 202.
        if text.lower() == "pending":
            return ArStatus("pending")
        try:
            info = json.loads(text)
            return ArStatus(
                "confirmed",
                confirmations=int(info["number_of_confirmations"]),
                block_height=int(info["block_height"]),
                block_hash=str(info["block_indep_hash"]),
            )
        except (ValueError, KeyError, TypeError):
            raise GatewayUnavailable(
                "status: unexpected answer", status_code=code, body=text, tx_id=tx_id
            ) from None

    def get_header(self, tx_id: str) -> dict[str, Any]:
        """Return a transaction's header (``GET /tx/<id>``), without its data.

        Raises:
            TransactionNotFound: the gateway does not know it, or does not serve
                pending headers yet (real gateways answer 202).
        """
        self._check_id(tx_id)
        resp = self._request("GET", f"/tx/{tx_id}")
        if resp.status_code == 202:
            raise TransactionNotFound(
                "header not served yet (pending)", status_code=202, tx_id=tx_id
            )
        if resp.status_code != 200:
            raise self._error_for(resp, "get tx", tx_id)
        try:
            header = resp.json()
        except ValueError:
            header = None
        if not isinstance(header, dict):
            raise GatewayUnavailable("get tx: not a JSON object", body=resp.text, tx_id=tx_id)
        header.pop("data", None)
        return header

    def get_data(self, tx_id: str, *, verify: bool = True) -> bytes:
        """Return a transaction's data.

        Args:
            tx_id: the transaction id.
            verify: check the bytes against the header's ``data_size`` and
                ``data_root`` (one more request, and a hash of the data).

        Raises:
            TransactionNotFound: the gateway has no such transaction or data (yet).
            ArweaveError: the data served does not match the transaction's data_root.
        """
        header = self.get_header(tx_id) if verify else None
        if header is not None and int(header.get("data_size") or 0) == 0:
            return b""
        resp = self._request("GET", f"/{tx_id}")
        if resp.status_code == 404:
            raise TransactionNotFound("data not found", status_code=404, tx_id=tx_id)
        if resp.status_code not in (200, 204):
            raise self._error_for(resp, "get data", tx_id)
        data = resp.content
        if header is not None:
            size, root = int(header["data_size"]), str(header.get("data_root") or "")
            if len(data) != size or b64url_encode(compute_data_root(data)) != root:
                raise ArweaveError(
                    f"the gateway served {len(data)} bytes that do not match the "
                    f"transaction's data_root/data_size ({size} bytes)",
                    tx_id=tx_id,
                )
        return data

    # -- writes ------------------------------------------------------------------

    def prepare(
        self,
        data: bytes,
        tags: Mapping[str, str] | None = None,
        *,
        reward: int | None = None,
    ) -> PreparedTx:
        """Sign a data transaction without posting it; this fixes its id.

        Args:
            data: the bytes to store.
            tags: tag names to values.
            reward: the fee in winston; the gateway's price by default.

        Raises:
            InvalidTransaction: bad tags.
            GatewayUnavailable: the anchor or price could not be fetched.
        """
        wallet = self._own_wallet()
        anchor = self.anchor()
        fee = self.price(len(data)) if reward is None else reward
        return build_transaction(wallet, bytes(data), tags, anchor=anchor, reward=fee)

    def post(self, prepared: PreparedTx) -> UploadResult:
        """Post a prepared transaction (header, then chunks if not inline). Idempotent.

        Posting a transaction the gateway already has succeeds with
        ``already_posted=True`` (the chunks are sent again, which gateways accept).

        Raises:
            InsufficientFunds: the wallet cannot pay the reward.
            InvalidTransaction: the gateway rejected the transaction or a chunk.
            GatewayUnavailable: the gateway could not be reached or failed.
        """
        inline = prepared.data_size <= self.inline_limit
        resp = self._request("POST", "/tx", json=prepared.body(inline=inline))
        already = False
        if resp.status_code == 208:
            already = True  # "Transaction already processed."
        elif resp.status_code != 200:
            error = self._error_for(resp, "post tx", prepared.tx_id, write=True)
            # A gateway's answer to a duplicate varies (208, 400 "already", arlocal's
            # 404 or 410 once the fee was spent): ask whether it has the tx.
            if not self._knows(prepared.tx_id):
                raise error
            already = True
            logger.info("arweave tx %s was already posted (%s)", prepared.tx_id, error)
        if not inline:
            self._post_chunks(prepared)
        logger.info(
            "posted arweave tx %s (%d bytes, %s)",
            prepared.tx_id,
            prepared.data_size,
            "inline" if inline else "chunked",
        )
        return UploadResult(
            tx_id=prepared.tx_id,
            data_root=prepared.data_root,
            size=prepared.data_size,
            already_posted=already,
        )

    def upload(self, data: bytes, tags: Mapping[str, str] | None = None) -> UploadResult:
        """Prepare and post in one call (not crash-safe: see :meth:`prepare`)."""
        return self.post(self.prepare(data, tags))

    def _post_chunks(self, prepared: PreparedTx) -> None:
        view = memoryview(prepared.data)
        tx_chunks = prepared.chunks()
        for chunk, proof in zip(tx_chunks.chunks, tx_chunks.proofs, strict=True):
            body = {
                "data_root": prepared.data_root,
                "data_size": str(prepared.data_size),
                "data_path": b64url_encode(proof.proof),
                "offset": str(proof.offset),
                "chunk": b64url_encode(bytes(view[chunk.min_byte_range : chunk.max_byte_range])),
            }
            resp = self._request("POST", "/chunk", json=body)
            # 208: the node already stores this chunk.
            if resp.status_code not in (200, 208):
                raise self._error_for(
                    resp, f"post chunk at offset {proof.offset}", prepared.tx_id, write=True
                )

    def _knows(self, tx_id: str) -> bool:
        try:
            return self.status(tx_id).kind != "not_found"
        except ArweaveError:
            return False

    def _own_wallet(self) -> ArweaveWallet:
        if self.wallet is None:
            raise ArweaveError("this ArweaveClient has no wallet")
        return self.wallet

    @staticmethod
    def _check_id(tx_id: str) -> None:
        if not is_tx_id(tx_id):
            raise InvalidTransaction(f"{tx_id!r} is not an Arweave transaction id")
