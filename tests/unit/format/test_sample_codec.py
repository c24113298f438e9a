"""The generated per-schema encoder and decoder agree with the generic paths."""

from __future__ import annotations

import mmap
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.errors import MissingColumnError, SampleEncodingError, ShardFormatError
from shardstream.format.mds import MDSSchema, MDSShardView, shard_header

COLUMNS = {"blob": "bytes", "label": "int", "name": "str", "vec": "ndarray:int16:3", "f": "float32"}


def _sample(blob: bytes, label: Any, name: str) -> dict[str, Any]:
    return {"blob": blob, "label": label, "name": name, "vec": np.arange(3, dtype=np.int16),
            "f": np.float32(1.5)}  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(
    blob=st.binary(max_size=64),
    label=st.integers(-(2**63), 2**63 - 1) | st.integers(-(2**40), 2**40).map(np.int64),
    name=st.text(max_size=20),
)
def test_fast_encoder_matches_the_generic_one(blob, label, name):
    schema = MDSSchema(COLUMNS)
    sample = _sample(blob, label, name)
    parts, size = schema.encode_sample_sized(sample)
    generic = schema.encode_sample(sample)
    assert [bytes(p) for p in parts] == [bytes(p) for p in generic]
    assert size == 4 + sum(map(len, generic))
    data = shard_header(b"{}", [size - 4]) + b"".join(parts)
    decoded = MDSShardView(data, schema, 1, source="s").get(0)
    assert decoded["blob"] == blob
    assert decoded["label"] == int(label)
    assert type(decoded["label"]) is int
    assert decoded["name"] == name


@pytest.mark.parametrize(
    ("column", "value", "error"),
    [
        (
            "label",
            2**63,
            SampleEncodingError,
        ),  # out of int64: struct fails, the generic path names it
        ("label", 1.5, SampleEncodingError),
        ("label", b"\x00" * 8, SampleEncodingError),
        ("blob", "text", SampleEncodingError),
        ("vec", np.zeros(4, np.int16), SampleEncodingError),
    ],
)
def test_fast_encoder_refuses_what_the_generic_one_refuses(column, value, error):
    schema = MDSSchema(COLUMNS)
    sample = {**_sample(b"x", 1, "n"), column: value}
    with pytest.raises(error, match=f"column '{column}'"):
        schema.encode_sample_sized(sample)


def test_fast_encoder_reports_a_missing_column():
    schema = MDSSchema(COLUMNS)
    sample = _sample(b"x", 1, "n")
    del sample["name"]
    with pytest.raises(MissingColumnError, match="'name'"):
        schema.encode_sample_sized(sample)


def test_getter_reads_bytes_from_an_mmap_as_bytes(tmp_path):
    schema = MDSSchema(COLUMNS)
    parts, size = schema.encode_sample_sized(_sample(b"payload", 7, "n"))
    path = tmp_path / "shard"
    path.write_bytes(shard_header(b"{}", [size - 4]) + b"".join(parts))
    with path.open("rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    view = MDSShardView(mapped, schema, 1, source=str(path))
    sample = view.get(0)
    assert type(sample["blob"]) is bytes
    assert sample["blob"] == b"payload"
    assert sample["label"] == 7


def test_getter_detects_sizes_that_disagree_with_the_offsets():
    schema = MDSSchema({"blob": "bytes"})
    parts, size = schema.encode_sample_sized({"blob": b"abc"})
    data = bytearray(shard_header(b"{}", [size - 4]) + b"".join(parts))
    data[-7] = 200  # the size prefix of 'blob' now claims 200 bytes
    with pytest.raises(ShardFormatError, match="sample 0"):
        MDSShardView(bytes(data), schema, 1, source="s").get(0)


def test_zero_copy_getter_returns_views_of_the_buffer():
    schema = MDSSchema(COLUMNS)
    parts, size = schema.encode_sample_sized(_sample(b"payload", 7, "n"))
    data = shard_header(b"{}", [size - 4]) + b"".join(parts)
    sample = MDSShardView(data, schema, 1, source="s", zero_copy=True).get(0)
    assert isinstance(sample["blob"], memoryview)
    assert sample["blob"].readonly
    assert sample["blob"].obj is data  # a view of the shard itself: nothing was copied
    assert bytes(sample["blob"]) == b"payload"


# --- hostile input (found by tests/property/test_fuzz_reader.py) -----------------------------


@pytest.mark.parametrize(
    ("spec", "payload", "cause"),
    [
        ("ndarray", b"", IndexError),  # no dtype code byte
        ("ndarray", b"\x08", IndexError),  # no shape byte
        ("json", b"[" * 50000, RecursionError),
        ("pil", struct.pack("<3I", 1 << 20, 1 << 20, 1) + b"L", SampleEncodingError),
    ],
)
def test_getter_reports_any_decoder_failure_as_a_shard_format_error(spec, payload, cause):
    schema = MDSSchema({"x": spec})
    data = shard_header(b"{}", [4 + len(payload)]) + struct.pack("<I", len(payload)) + payload
    with pytest.raises(ShardFormatError, match="s, sample 0: cannot decode") as info:
        MDSShardView(data, schema, 1, source="s").get(0)
    assert isinstance(info.value.__cause__, cause)


def test_getter_still_raises_index_error_for_an_id_out_of_range():
    schema = MDSSchema({"x": "ndarray"})
    data = shard_header(b"{}", [])
    with pytest.raises(IndexError):
        MDSShardView(data, schema, 0, source="s").get(0)
