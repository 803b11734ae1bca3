"""Chunking and data_root against arweave-js, the reference implementation.

Two independent sources of truth: roots pinned from arweave-js 1.15.7 (so these
run without node), and arweave-js itself from ``node_modules`` run as an oracle
on many sizes, comparing roots, chunk ranges, chunk hashes and proofs.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from statemachine_wf.adapters.arweave.devnode import find_node_modules
from statemachine_wf.adapters.arweave.merkle import (
    MAX_CHUNK_SIZE,
    MIN_CHUNK_SIZE,
    chunk_data,
    compute_data_root,
    generate_transaction_chunks,
    validate_path,
)
from statemachine_wf.adapters.arweave.transaction import b64url_decode, b64url_encode

ORACLE = Path(__file__).with_name("merkle_oracle.js")
KIB = 1024


def pattern(size: int) -> bytes:
    return bytes(i % 251 for i in range(size))


# data_root of pattern(size), computed by arweave-js generateTransactionChunks.
PINNED = [
    (1, "Ht_yZhXGBDUZfLv4OD6we7FkrjcpDpGPwQZEZgEJVfk"),
    (1000, "OBN0lHZnrFrskv9s1HKU7VRRDXrzQ3sOgMniX5cGavM"),
    (32767, "KPVZR3OLW4ug9iJHpXCungnxv8ZPFe5VSimV5JPtuXQ"),
    (32768, "a582yS2PyuWZpQmfA1j57OoWUALuzzSEuNeJvZXiC6U"),
    (262143, "uzNiZl92JD1TtVRJpE6nQtvmpLBu8PJ_CL5UsfjR2Jg"),
    (262144, "gty7KB2baLFp7OGxuV2wBeX3NippS1tNVlMOZryIq5o"),
    (262145, "kJKkN6QWAcUM_WQUxeNXnnwKy0fp7myUNNob6XNlOPA"),
    (263144, "bFtxR6l6BRJt4Y7utAH1mGDg4Ps969jw17_NfjGzB_Q"),
    (294911, "ftgH8HjzmYUv7zYP-oTk5XovsehoyoBTxQA8t2waFIQ"),
    (294912, "qk73Qz9Ymp1tr4dzJw_hTDS1VoVwBeLLNwkytN1sBYY"),
    (524288, "H2bNmvftzAlIQXVYCetFsJ9f0uoC4C2FbfivZTRSyqI"),
    (786432, "PbCQLdMgeWZMjYxLCQu-76J0SAB2CKaPx3cHIr9T0gk"),
    (3145728, "xMCNjgBo-iXjcUjQvN8PLC6dNs3sO7HVQRC7L3B1xR0"),
]


@pytest.mark.parametrize(("size", "expected"), PINNED)
def test_data_root_matches_pinned_arweave_js_vectors(size: int, expected: str) -> None:
    assert b64url_encode(compute_data_root(pattern(size))) == expected


def test_empty_data_has_empty_root_and_no_chunks() -> None:
    result = generate_transaction_chunks(b"")
    assert result.data_root == b""
    assert result.chunks == ()
    assert result.proofs == ()


@pytest.mark.parametrize(
    ("size", "expected_sizes"),
    [
        (1000, [1000]),
        (MAX_CHUNK_SIZE, [MAX_CHUNK_SIZE, 0]),
        (2 * MAX_CHUNK_SIZE, [MAX_CHUNK_SIZE, MAX_CHUNK_SIZE, 0]),
        # Remainder 1000 < 32 KiB: the last two chunks share 256 KiB + 1000.
        (MAX_CHUNK_SIZE + 1000, [131572, 131572]),
        # Odd total: the first of the pair takes the ceiling.
        (MAX_CHUNK_SIZE + 1001, [131573, 131572]),
        (MAX_CHUNK_SIZE + MIN_CHUNK_SIZE, [MAX_CHUNK_SIZE, MIN_CHUNK_SIZE]),
        (
            2 * MAX_CHUNK_SIZE + MIN_CHUNK_SIZE - 1,
            [MAX_CHUNK_SIZE, (MAX_CHUNK_SIZE + MIN_CHUNK_SIZE) // 2, 147455],
        ),
    ],
)
def test_chunk_sizes_follow_the_rebalancing_rule(size: int, expected_sizes: list[int]) -> None:
    chunks = chunk_data(pattern(size))
    assert [c.size for c in chunks] == expected_sizes
    assert chunks[0].min_byte_range == 0
    assert chunks[-1].max_byte_range == size
    for before, after in itertools.pairwise(chunks):
        assert before.max_byte_range == after.min_byte_range


def test_trailing_empty_chunk_is_in_the_root_but_not_uploaded() -> None:
    data = pattern(2 * MAX_CHUNK_SIZE)
    result = generate_transaction_chunks(data)
    assert [c.size for c in result.chunks] == [MAX_CHUNK_SIZE, MAX_CHUNK_SIZE]
    assert len(result.proofs) == 2
    # The root of the two real leaves alone differs: the empty leaf counts.
    two_leaf_root = _naive_root(data, [(0, MAX_CHUNK_SIZE), (MAX_CHUNK_SIZE, 2 * MAX_CHUNK_SIZE)])
    three_leaf_root = _naive_root(
        data, [(0, MAX_CHUNK_SIZE), (MAX_CHUNK_SIZE, 2 * MAX_CHUNK_SIZE), (2 * MAX_CHUNK_SIZE,) * 2]
    )
    assert result.data_root == three_leaf_root != two_leaf_root


def _naive_root(data: bytes, ranges: list[tuple[int, int]]) -> bytes:
    """A from-the-spec merkle root, written apart from the module under test."""

    def h(*parts: bytes) -> bytes:
        return hashlib.sha256(b"".join(parts)).digest()

    def note(n: int) -> bytes:
        return n.to_bytes(32, "big")

    layer = [(h(h(h(data[a:b])), h(note(b))), b) for a, b in ranges]
    while len(layer) > 1:
        nxt = []
        for i in range(0, len(layer), 2):
            if i + 1 < len(layer):
                (lid, lmax), (rid, rmax) = layer[i], layer[i + 1]
                nxt.append((h(h(lid), h(rid), h(note(lmax))), rmax))
            else:
                nxt.append(layer[i])
        layer = nxt
    return layer[0][0]


@pytest.mark.parametrize("size", [1, 1000, 262144, 263144, 524288, 900_001, 3145728])
def test_root_matches_a_naive_spec_implementation(size: int) -> None:
    data = random.Random(size).randbytes(size)
    ranges = [(c.min_byte_range, c.max_byte_range) for c in chunk_data(data)]
    assert compute_data_root(data) == _naive_root(data, ranges)


@pytest.mark.parametrize("size", [1, 1000, 262144, 263144, 524288, 1_000_000, 3145728])
def test_every_proof_validates_and_tampering_breaks_it(size: int) -> None:
    data = random.Random(size).randbytes(size)
    result = generate_transaction_chunks(data)
    for chunk, proof in zip(result.chunks, result.proofs, strict=True):
        assert proof.offset == chunk.max_byte_range - 1
        bounds = validate_path(result.data_root, proof.offset, 0, size, proof.proof)
        assert bounds == (chunk.min_byte_range, chunk.max_byte_range)
        # The proof ends with the chunk's own hash and end offset.
        assert (
            proof.proof[-64:-32]
            == hashlib.sha256(data[chunk.min_byte_range : chunk.max_byte_range]).digest()
        )
        flipped = bytearray(proof.proof)
        flipped[0] ^= 1
        assert validate_path(result.data_root, proof.offset, 0, size, bytes(flipped)) is None
        wrong_root = bytes(32)
        assert validate_path(wrong_root, proof.offset, 0, size, proof.proof) is None


def _oracle_sizes() -> list[int]:
    rng = random.Random(20261121)
    edges = [
        1,
        2,
        MIN_CHUNK_SIZE - 1,
        MIN_CHUNK_SIZE,
        MAX_CHUNK_SIZE - 1,
        MAX_CHUNK_SIZE,
        MAX_CHUNK_SIZE + 1,
        MAX_CHUNK_SIZE + MIN_CHUNK_SIZE - 1,
        MAX_CHUNK_SIZE + MIN_CHUNK_SIZE,
        2 * MAX_CHUNK_SIZE,
        2 * MAX_CHUNK_SIZE + 1,
        3 * MAX_CHUNK_SIZE + 7,
        5 * MAX_CHUNK_SIZE,
        3 * 1024 * KIB,
        3 * 1024 * KIB + MIN_CHUNK_SIZE - 1,
    ]
    randoms = [rng.randrange(1, 4 * 1024 * KIB) for _ in range(20)]
    # Sizes whose remainder falls in the rebalanced band, where the Python client fails.
    banded = [
        rng.randrange(1, 12) * MAX_CHUNK_SIZE + rng.randrange(0, MIN_CHUNK_SIZE) for _ in range(8)
    ]
    return edges + randoms + banded


def test_matches_arweave_js_on_many_sizes(tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node is not None, "node must be on PATH (it runs arlocal too)"
    modules = find_node_modules()
    assert (modules / "arweave" / "node" / "lib" / "merkle.js").is_file()
    sizes = _oracle_sizes()
    blobs: list[bytes] = []
    paths: list[str] = []
    for i, size in enumerate(sizes):
        data = random.Random(i).randbytes(size)
        path = tmp_path / f"{i}.bin"
        path.write_bytes(data)
        blobs.append(data)
        paths.append(str(path))
    proc = subprocess.run(
        [node, str(ORACLE)],
        input=json.dumps(paths),
        capture_output=True,
        text=True,
        env={**os.environ, "SWF_NODE_MODULES": str(modules)},
        timeout=120,
        check=True,
    )
    expected = json.loads(proc.stdout)
    assert len(expected) == len(sizes)
    for size, data, js in zip(sizes, blobs, expected, strict=True):
        ours = generate_transaction_chunks(data)
        assert b64url_encode(ours.data_root) == js["data_root"], size
        assert [
            [c.min_byte_range, c.max_byte_range, b64url_encode(c.data_hash)] for c in ours.chunks
        ] == js["chunks"], size
        assert [[p.offset, b64url_encode(p.proof)] for p in ours.proofs] == js["proofs"], size
        for offset, proof in js["proofs"]:
            assert validate_path(ours.data_root, offset, 0, size, b64url_decode(proof)) is not None
