from __future__ import annotations

import hashlib

import pytest
import xxhash

from shardstream.errors import ConfigurationError
from shardstream.format.hashing import HASH_ALGORITHMS, check_hash_names, hash_bytes, hash_chunks

HASHLIB = [
    "blake2b",
    "blake2s",
    "md5",
    "sha1",
    "sha224",
    "sha256",
    "sha384",
    "sha512",
    "sha3_224",
    "sha3_256",
    "sha3_384",
    "sha3_512",
]
XXHASH = ["xxh32", "xxh64", "xxh128", "xxh3_64", "xxh3_128"]
DATA = b"the quick brown fox" * 10


def test_algorithms_are_the_documented_ones_sorted():
    assert set(HASH_ALGORITHMS) == set(HASHLIB) | set(XXHASH)
    assert list(HASH_ALGORITHMS) == sorted(HASH_ALGORITHMS)
    assert {HASH_ALGORITHMS[name] for name in HASHLIB} == {"hashlib"}
    assert {HASH_ALGORITHMS[name] for name in XXHASH} == {"xxhash"}


@pytest.mark.parametrize("name", HASHLIB)
def test_hashlib_digests(name: str):
    expected = hashlib.new(name, DATA).hexdigest()
    assert hash_bytes(name, DATA) == expected
    assert hash_bytes(name, memoryview(DATA)) == expected


@pytest.mark.parametrize("name", XXHASH)
def test_xxhash_digests(name: str):
    expected = getattr(xxhash, name)(DATA).hexdigest()
    assert hash_bytes(name, DATA) == expected
    assert hash_bytes(name, memoryview(DATA)) == expected


@pytest.mark.parametrize("name", HASHLIB + XXHASH)
def test_digests_are_lowercase_hex_and_depend_on_the_data(name: str):
    digest = hash_bytes(name, DATA)
    assert digest == digest.lower()
    int(digest, 16)
    assert hash_bytes(name, DATA + b"!") != digest


@pytest.mark.parametrize("name", ["sha", "SHA1", "crc32", "xxh3"])
def test_unknown_algorithm(name: str):
    with pytest.raises(ConfigurationError, match=rf"unknown hash algorithm {name!r}; use one of"):
        hash_bytes(name, DATA)


@pytest.mark.parametrize(
    "names", [None, [], ["sha1"], ["md5", "sha1", "xxh64"], ("sha256", "xxh3_64")]
)
def test_check_hash_names_accepts_sorted_unique_names(names: list[str] | None):
    assert check_hash_names(names) == list(names or [])


@pytest.mark.parametrize(
    ("names", "fix"),
    [
        (["sha1", "md5"], "['md5', 'sha1']"),
        (["sha1", "sha1"], "['sha1']"),
        (["xxh64", "md5", "md5"], "['md5', 'xxh64']"),
    ],
)
def test_check_hash_names_refuses_unsorted_or_duplicate(names: list[str], fix: str):
    with pytest.raises(
        ConfigurationError, match=rf"unique and sorted, got .*; pass {__import__('re').escape(fix)}"
    ):
        check_hash_names(names)


def test_check_hash_names_refuses_unknown_names():
    with pytest.raises(ConfigurationError, match="unknown hash algorithm 'sha0'"):
        check_hash_names(["md5", "sha0"])


@pytest.mark.parametrize("algorithm", ["sha1", "xxh64", "blake2b"])
def test_hash_of_chunks_is_the_hash_of_their_concatenation(algorithm: str):
    chunks: list[bytes | memoryview] = [b"", b"abc", bytes(range(256)) * 40, memoryview(b"tail")]
    whole = b"".join(bytes(chunk) for chunk in chunks)
    assert hash_chunks(algorithm, chunks) == hash_bytes(algorithm, whole)
    assert hash_chunks(algorithm, []) == hash_bytes(algorithm, b"")
