from __future__ import annotations

import bz2
import gzip
import hashlib
import tracemalloc
from collections.abc import Callable

import brotli
import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.errors import ConfigurationError, ShardFormatError
from shardstream.format.compression import COMPRESSIONS, Compression, get_compression

# Codes, levels and defaults as the format document lists them.
DOC_LEVELS = {
    "br": (range(12), 11),
    "bz2": (range(1, 10), 9),
    "gz": (range(10), 9),
    "snappy": (None, None),
    "zstd": (range(1, 23), 3),
}
DATA = b"shardstream " * 500 + bytes(range(256))


def test_codes_are_the_documented_ones_sorted():
    assert list(COMPRESSIONS) == sorted(DOC_LEVELS)


@pytest.mark.parametrize("code", sorted(DOC_LEVELS))
def test_levels_and_defaults(code: str):
    levels, default = DOC_LEVELS[code]
    family = COMPRESSIONS[code]
    assert family.code == code
    assert family.levels == levels
    assert family.default_level == default
    compression = get_compression(code)
    assert isinstance(compression, Compression)
    assert (compression.name, compression.level, compression.extension) == (code, default, code)


@pytest.mark.parametrize("code", sorted(DOC_LEVELS))
def test_round_trip_at_the_default_level(code: str):
    compression = get_compression(code)
    packed = compression.compress(DATA)
    assert packed != DATA
    assert len(packed) < len(DATA)
    assert compression.decompress(packed) == DATA


@pytest.mark.parametrize(
    "name",
    [
        f"{code}:{level}"
        for code, (levels, _) in DOC_LEVELS.items()
        if levels
        for level in (levels[0], levels[-1])
    ],
)
def test_round_trip_at_the_extreme_levels(name: str):
    compression = get_compression(name)
    assert compression.name == name
    assert compression.level == int(name.partition(":")[2])
    assert compression.extension == name.partition(":")[0]
    assert compression.decompress(compression.compress(DATA)) == DATA


@pytest.mark.parametrize("level", [1, 3, 19])
def test_zstd_level_reaches_the_compressor(level: int):
    expected = zstandard.ZstdCompressor(level=level).compress(DATA)
    assert get_compression(f"zstd:{level}").compress(DATA) == expected


@pytest.mark.parametrize("level", [0, 1, 9])
def test_gz_level_reaches_the_compressor(level: int):
    assert get_compression(f"gz:{level}").compress(DATA) == gzip.compress(DATA, level, mtime=0)


def test_bz2_and_br_levels_reach_the_compressor():
    assert get_compression("bz2:1").compress(DATA) == bz2.compress(DATA, 1)
    assert get_compression("br:0").compress(DATA) == brotli.compress(DATA, quality=0)
    assert get_compression("br").compress(DATA) == brotli.compress(DATA, quality=11)


def test_gzip_output_is_reproducible():
    packed = get_compression("gz").compress(DATA)
    assert packed == get_compression("gz").compress(DATA)
    assert packed[4:8] == b"\x00\x00\x00\x00"  # MTIME field of the gzip header (RFC 1952)
    assert gzip.decompress(packed) == DATA


def test_zstd_reads_streamed_frames_without_a_content_size():
    compressor = zstandard.ZstdCompressor().compressobj()
    streamed = compressor.compress(DATA) + compressor.flush()
    assert get_compression("zstd").decompress(streamed) == DATA


def test_empty_data_round_trips():
    for code in DOC_LEVELS:
        compression = get_compression(code)
        assert compression.decompress(compression.compress(b"")) == b""


@pytest.mark.parametrize("name", ["lz4", "zip", "", "ZSTD", "gzip:5"])
def test_unknown_code(name: str):
    with pytest.raises(
        ConfigurationError, match=rf"unknown compression {name!r}; use one of br, bz2"
    ):
        get_compression(name)


@pytest.mark.parametrize(
    ("name", "low", "high"),
    [
        ("zstd:0", 1, 22),
        ("zstd:23", 1, 22),
        ("zstd:-1", 1, 22),
        ("zstd:x", 1, 22),
        ("zstd:", 1, 22),
        ("zstd:1.5", 1, 22),
        ("gz:10", 0, 9),
        ("bz2:0", 1, 9),
        ("br:12", 0, 11),
    ],
)
def test_level_out_of_range(name: str, low: int, high: int):
    with pytest.raises(ConfigurationError, match=rf"{name!r}: the level .* from {low} to {high}"):
        get_compression(name)


def test_snappy_takes_no_level():
    with pytest.raises(ConfigurationError, match=r"'snappy' takes no level, got 'snappy:1'"):
        get_compression("snappy:1")


@pytest.mark.parametrize("code", sorted(DOC_LEVELS))
def test_corrupt_data_raises_shard_format_error(code: str):
    with pytest.raises(ShardFormatError, match=rf"shard.00003.mds.{code} is not valid {code} data"):
        get_compression(code).decompress(
            b"\x00garbage, not compressed", source=f"shard.00003.mds.{code}"
        )


# --- hostile input (found by tests/property/test_fuzz_reader.py) -----------------------------


@pytest.mark.parametrize("name", ["zstd:\u00b2", "zstd:\u0663", "zstd:" + "9" * 5000])
def test_level_that_int_cannot_parse_is_a_configuration_error(name: str):
    with pytest.raises(ConfigurationError, match=r"the level of 'zstd' must be an integer"):
        get_compression(name)


@pytest.mark.parametrize("code", ["bz2", "gz", "zstd"])
def test_max_size_refuses_a_bomb_before_inflating_it(code: str):
    compression = get_compression(code)
    bomb = compression.compress(bytes(64 << 20))  # 64 MiB of zeros, a few KiB packed
    with pytest.raises(ShardFormatError, match=r"s\.mds decompresses to more than the 1000 bytes"):
        compression.decompress(bomb, source="s.mds", max_size=1000)


def fastest(code: str) -> Compression:
    levels = DOC_LEVELS[code][0]
    return get_compression(code if levels is None else f"{code}:{levels[0] or 1}")


def traced_peak(run: Callable[[], object]) -> int:
    """The most memory Python and numpy held at once while ``run`` ran, in bytes."""
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("code", sorted(DOC_LEVELS))
def test_every_codec_refuses_a_bomb_within_the_size_index_json_records(code: str):
    compression = fastest(code)
    bomb = compression.compress(bytes(64 << 20))  # 64 MiB of zeros, at most a few MiB packed

    def decompress() -> None:
        with pytest.raises(ShardFormatError, match=r"s\.mds decompresses to more than the 1048576"):
            compression.decompress(bomb, source="s.mds", max_size=1 << 20)

    assert traced_peak(decompress) < 8 << 20  # a few pieces of a MiB; the data is 16-64 MiB


@pytest.mark.parametrize("code", ["br", "bz2", "gz", "zstd"])
def test_decompressing_in_pieces_holds_about_a_piece_at_a_time(code: str):
    data = bytes(range(256)) * (64 << 10)  # 16 MiB
    compression = fastest(code)
    packed = compression.compress(data)
    digest = hashlib.sha256()

    def decompress() -> None:
        for piece in compression.decompress_chunks(packed, max_size=len(data)):
            digest.update(piece)

    assert traced_peak(decompress) < 8 << 20  # a few pieces of a MiB; the data is 16-64 MiB
    assert digest.digest() == hashlib.sha256(data).digest()


def test_a_snappy_block_declaring_more_than_max_size_is_refused_unread():
    block = get_compression("snappy").compress(DATA)
    with pytest.raises(ShardFormatError, match="decompresses to more than the 100 bytes"):
        get_compression("snappy").decompress(block, max_size=100)
    with pytest.raises(ShardFormatError, match="is not valid snappy data"):
        get_compression("snappy").decompress(b"\xff" * 6, max_size=100)


def test_a_truncated_brotli_stream_is_refused():
    packed = get_compression("br").compress(DATA)
    with pytest.raises(ShardFormatError, match="is not valid br data"):
        get_compression("br").decompress(packed[:-5], max_size=len(DATA))


@pytest.mark.parametrize("code", sorted(DOC_LEVELS))
def test_max_size_at_the_exact_size_decompresses(code: str):
    compression = get_compression(code)
    assert compression.decompress(compression.compress(DATA), max_size=len(DATA)) == DATA


def test_zstd_frame_claiming_a_huge_content_size_allocates_nothing():
    # Frame header: magic, descriptor (8-byte content size), window 128 KiB, size 2**40; then
    # one last RLE block of 1000 zero bytes.
    frame = b"\x28\xb5\x2f\xfd\xc0\x38" + (2**40).to_bytes(8, "little")
    frame += (1 | 1 << 1 | 1000 << 3).to_bytes(3, "little") + b"\x00"
    with pytest.raises(ShardFormatError, match="is not valid zstd data"):
        get_compression("zstd").decompress(frame, max_size=10_000)


def test_zstd_reads_every_frame_of_a_concatenation():
    two = zstandard.ZstdCompressor().compress(b"a" * 100) + zstandard.ZstdCompressor().compress(
        b"b" * 50
    )
    assert get_compression("zstd").decompress(two, max_size=150) == b"a" * 100 + b"b" * 50


_PART = st.one_of(
    st.binary(max_size=64),
    st.builds(lambda n, b: b * n, st.integers(0, 300_000), st.binary(min_size=1, max_size=3)),
)


@settings(max_examples=40, deadline=None)
@given(parts=st.lists(_PART, max_size=40), code=st.sampled_from(["zstd", "zstd:1", "gz", "br:1"]))
def test_compress_parts_is_the_compressed_concatenation(parts: list[bytes], code: str):
    compression = get_compression(code)
    whole = b"".join(parts)
    packed = b"".join(compression.compress_parts([*parts[:1], *(memoryview(p) for p in parts[1:])]))
    assert compression.decompress(packed, max_size=len(whole)) == whole
    if code.startswith("zstd"):  # one frame that records its content size, as compress's does
        assert zstandard.frame_content_size(packed) == len(whole)
        assert zstandard.ZstdDecompressor().decompress(packed) == whole


def test_compress_parts_streams_zstd_in_pieces_and_keeps_its_level():
    noise = np.random.default_rng(0).bytes(3 << 20)
    samples = [noise[i : i + 1024] for i in range(0, len(noise), 1024)]
    pieces = get_compression("zstd").compress_parts(samples)
    assert len(pieces) > 1  # in pieces of about a MiB, not one joined buffer
    assert get_compression("zstd").decompress(b"".join(pieces)) == noise
    rng = np.random.default_rng(1)
    words = [bytes(rng.integers(97, 123, rng.integers(2, 9), dtype=np.uint8)) for _ in range(3000)]
    text = [b" ".join(words[k] for k in rng.integers(0, 3000, 170)) for _ in range(2000)]
    sizes = {}
    for level in (1, 19):
        packed = b"".join(get_compression(f"zstd:{level}").compress_parts(text))
        assert get_compression("zstd").decompress(packed) == b"".join(text)
        one_shot = zstandard.ZstdCompressor(level=level).compress(b"".join(text))
        assert abs(len(packed) - len(one_shot)) <= len(one_shot) // 100
        sizes[level] = len(packed)
    assert sizes[19] < sizes[1] * 0.9  # the level reaches the compressor
