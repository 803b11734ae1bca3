"""Arweave v2 data chunking, ``data_root`` and chunk proofs (pure, no I/O).

This is a line-for-line port of arweave-js ``lib/merkle.ts``
(``chunkData``/``generateLeaves``/``buildLayers``/``generateProofs``/
``generateTransactionChunks``), which is what gateways check a v2 transaction's
``data_root`` against. arweave-python-client 1.0.19 gets the root wrong for sizes
>= 256 KiB whose remainder modulo 256 KiB is < 32 KiB (exactly 256 KiB, 512 KiB,
3 MiB, ...), so the adapter never uses it.

Rules that are easy to get wrong:

* Chunks are at most 256 KiB. When the bytes left after a full chunk would be a
  chunk of fewer than 32 KiB, the current chunk takes ``ceil(rest / 2)`` instead,
  so the last two chunks are balanced.
* A size that is an exact multiple of 256 KiB ends with a *zero-length* chunk.
  Its leaf is part of the tree (and so of ``data_root``), but the chunk and its
  proof are dropped from the upload.
* An odd node at the end of a layer is carried up unchanged, not hashed.
* Empty data has no tree: ``data_root`` is the empty string and nothing is chunked.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

__all__ = [
    "MAX_CHUNK_SIZE",
    "MIN_CHUNK_SIZE",
    "Chunk",
    "ChunkProof",
    "TransactionChunks",
    "chunk_data",
    "compute_data_root",
    "generate_transaction_chunks",
    "validate_path",
]

MAX_CHUNK_SIZE = 256 * 1024
MIN_CHUNK_SIZE = 32 * 1024
_NOTE_SIZE = 32
_HASH_SIZE = 32


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk of a transaction's data: ``data[min_byte_range:max_byte_range]``."""

    data_hash: bytes
    min_byte_range: int
    max_byte_range: int

    @property
    def size(self) -> int:
        """Number of data bytes in the chunk."""
        return self.max_byte_range - self.min_byte_range


@dataclass(frozen=True, slots=True)
class ChunkProof:
    """The merkle path proving one chunk belongs to ``data_root``.

    Attributes:
        offset: the chunk's last byte offset in the data (``max_byte_range - 1``).
        proof: the ``data_path`` sent with ``POST /chunk``.
    """

    offset: int
    proof: bytes


@dataclass(frozen=True, slots=True)
class TransactionChunks:
    """What a v2 transaction needs about its data: the root, chunks and proofs.

    ``chunks`` and ``proofs`` are parallel lists; a trailing zero-length chunk is
    already dropped from both.
    """

    data_root: bytes
    chunks: tuple[Chunk, ...]
    proofs: tuple[ChunkProof, ...]


@dataclass(frozen=True, slots=True)
class _Node:
    id: bytes
    max_byte_range: int
    # Leaf fields.
    data_hash: bytes = b""
    # Branch fields; a leaf has neither child.
    byte_range: int = 0
    left: _Node | None = None
    right: _Node | None = None


def _sha256(*parts: bytes) -> bytes:
    return hashlib.sha256(b"".join(parts)).digest()


def _note(value: int) -> bytes:
    return value.to_bytes(_NOTE_SIZE, "big")


def chunk_data(data: bytes) -> list[Chunk]:
    """Split ``data`` into chunks exactly as arweave-js ``chunkData`` does.

    Args:
        data: the transaction data.

    Returns:
        The chunks in order, including a zero-length last chunk when
        ``len(data)`` is a multiple of :data:`MAX_CHUNK_SIZE` (or zero).
    """
    view = memoryview(data)
    chunks: list[Chunk] = []
    cursor = 0
    while len(view) - cursor >= MAX_CHUNK_SIZE:
        rest = len(view) - cursor
        chunk_size = MAX_CHUNK_SIZE
        next_chunk_size = rest - MAX_CHUNK_SIZE
        if 0 < next_chunk_size < MIN_CHUNK_SIZE:
            chunk_size = -(-rest // 2)  # ceil, as Math.ceil(rest / 2)
        chunks.append(
            Chunk(
                data_hash=hashlib.sha256(view[cursor : cursor + chunk_size]).digest(),
                min_byte_range=cursor,
                max_byte_range=cursor + chunk_size,
            )
        )
        cursor += chunk_size
    chunks.append(
        Chunk(
            data_hash=hashlib.sha256(view[cursor:]).digest(),
            min_byte_range=cursor,
            max_byte_range=len(view),
        )
    )
    return chunks


def _leaves(chunks: list[Chunk]) -> list[_Node]:
    return [
        _Node(
            id=_sha256(_sha256(c.data_hash), _sha256(_note(c.max_byte_range))),
            max_byte_range=c.max_byte_range,
            data_hash=c.data_hash,
        )
        for c in chunks
    ]


def _build_layers(nodes: list[_Node]) -> _Node:
    while len(nodes) > 1:
        layer: list[_Node] = []
        for i in range(0, len(nodes), 2):
            left = nodes[i]
            if i + 1 == len(nodes):
                layer.append(left)
                continue
            right = nodes[i + 1]
            layer.append(
                _Node(
                    id=_sha256(
                        _sha256(left.id), _sha256(right.id), _sha256(_note(left.max_byte_range))
                    ),
                    max_byte_range=right.max_byte_range,
                    byte_range=left.max_byte_range,
                    left=left,
                    right=right,
                )
            )
        nodes = layer
    return nodes[0]


def _proofs(root: _Node) -> list[ChunkProof]:
    # Iterative depth-first walk, left before right, so proofs come out in chunk
    # order; recursion would be fine too but the tree of a large file is deep-ish.
    out: list[ChunkProof] = []
    stack: list[tuple[_Node, bytes]] = [(root, b"")]
    while stack:
        node, path = stack.pop()
        if node.left is None or node.right is None:
            out.append(
                ChunkProof(
                    offset=node.max_byte_range - 1,
                    proof=path + node.data_hash + _note(node.max_byte_range),
                )
            )
            continue
        partial = path + node.left.id + node.right.id + _note(node.byte_range)
        stack.append((node.right, partial))
        stack.append((node.left, partial))
    return out


def generate_transaction_chunks(data: bytes) -> TransactionChunks:
    """Compute ``data_root``, chunks and proofs like arweave-js ``generateTransactionChunks``.

    Args:
        data: the transaction data.

    Returns:
        The root and the chunks/proofs to upload. For empty data the root is
        ``b""`` and there are no chunks (arweave-js ``prepareChunks``).
    """
    if not data:
        return TransactionChunks(data_root=b"", chunks=(), proofs=())
    chunks = chunk_data(data)
    root = _build_layers(_leaves(chunks))
    proofs = _proofs(root)
    if chunks[-1].size == 0:
        # The empty leaf stays in the root; only its upload is skipped.
        chunks = chunks[:-1]
        proofs = proofs[:-1]
    return TransactionChunks(data_root=root.id, chunks=tuple(chunks), proofs=tuple(proofs))


def compute_data_root(data: bytes) -> bytes:
    """Return the raw 32-byte ``data_root`` of ``data`` (``b""`` for empty data)."""
    return generate_transaction_chunks(data).data_root


def validate_path(
    root: bytes, dest: int, left_bound: int, right_bound: int, path: bytes
) -> tuple[int, int] | None:
    """Check a chunk proof against ``root`` (port of arweave-js ``validatePath``).

    Args:
        root: the raw ``data_root``.
        dest: a byte offset inside the chunk being proven.
        left_bound: lowest offset the chunk may start at (0 for a whole tx).
        right_bound: the data size.
        path: the proof (``data_path``).

    Returns:
        ``(min_byte_range, max_byte_range)`` of the proven chunk, or ``None`` when
        the proof does not match.
    """
    node_id = root
    if right_bound <= 0:
        return None
    if dest >= right_bound:
        dest, left_bound = 0, right_bound - 1
    if dest < 0:
        dest, left_bound = 0, 0
    while True:
        if len(path) == _HASH_SIZE + _NOTE_SIZE:
            data_hash, end_note = path[:_HASH_SIZE], path[_HASH_SIZE:]
            if node_id == _sha256(_sha256(data_hash), _sha256(end_note)):
                return left_bound, right_bound
            return None
        if len(path) < 2 * _HASH_SIZE + _NOTE_SIZE:
            return None
        left = path[:_HASH_SIZE]
        right = path[_HASH_SIZE : 2 * _HASH_SIZE]
        offset_note = path[2 * _HASH_SIZE : 2 * _HASH_SIZE + _NOTE_SIZE]
        path = path[2 * _HASH_SIZE + _NOTE_SIZE :]
        if node_id != _sha256(_sha256(left), _sha256(right), _sha256(offset_note)):
            return None
        offset = int.from_bytes(offset_note, "big")
        if dest < offset:
            node_id, right_bound = left, min(right_bound, offset)
        else:
            node_id, left_bound = right, max(left_bound, offset)
