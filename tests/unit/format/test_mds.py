from __future__ import annotations

import json
import mmap
import pickle
import re
import struct
from typing import Any

import numpy as np
import pytest

from shardstream.errors import (
    MissingColumnError,
    SampleEncodingError,
    ShardFormatError,
    ShardTooLargeError,
    UnknownEncodingError,
    UnsafeEncodingError,
)
from shardstream.format.encodings import Encoding, register_encoding
from shardstream.format.mds import MAX_SHARD_BYTES, MDSSchema, MDSShardView, shard_header

COLUMNS = {"text": "str", "id": "int", "blob": "bytes", "vec": "ndarray:float32:3"}


def build_shard(schema: MDSSchema, samples: list[dict[str, Any]], config: bytes = b"{}") -> bytes:
    payloads = [b"".join(schema.encode_sample(sample)) for sample in samples]
    return shard_header(config, [len(p) for p in payloads]) + b"".join(payloads)


def sample(i: int) -> dict[str, Any]:
    return {"text": "é" * i, "id": i - 5, "blob": bytes(range(i)), "vec": np.full(3, i, np.float32)}


def assert_sample_equal(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    assert actual.keys() == expected.keys()
    for key, value in expected.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(actual[key], value)
        else:
            assert actual[key] == value


def test_max_shard_bytes_is_the_reach_of_uint32_offsets():
    assert MAX_SHARD_BYTES == 2**32


def test_schema_sorts_the_columns():
    schema = MDSSchema(COLUMNS)
    assert schema.names == ["blob", "id", "text", "vec"]
    assert schema.columns == {
        "blob": "bytes",
        "id": "int",
        "text": "str",
        "vec": "ndarray:float32:3",
    }
    assert list(schema.columns) == schema.names
    assert schema.sizes == [None, 8, None, 12]


def test_schema_can_keep_the_stored_order():
    schema = MDSSchema({"z": "int", "a": "str"}, sort=False)
    assert schema.names == ["z", "a"]
    assert schema.sizes == [8, None]


def test_schema_with_an_unknown_encoding():
    with pytest.raises(UnknownEncodingError, match="unknown column encoding 'float128'"):
        MDSSchema({"x": "float128"})


def test_config_bytes_is_the_entry_without_files_and_samples():
    schema = MDSSchema(COLUMNS)
    data = schema.config_bytes(compression="zstd:7", hashes=["sha1", "xxh64"], size_limit=1024)
    config = json.loads(data)
    assert config == {
        "column_encodings": ["bytes", "int", "str", "ndarray:float32:3"],
        "column_names": ["blob", "id", "text", "vec"],
        "column_sizes": [None, 8, None, 12],
        "compression": "zstd:7",
        "format": "mds",
        "hashes": ["sha1", "xxh64"],
        "size_limit": 1024,
        "version": 2,
    }
    assert data == json.dumps(config, sort_keys=True).encode()


def test_sample_layout_sizes_of_variable_columns_then_payloads():
    schema = MDSSchema({"a": "int", "b": "str", "c": "bytes"})
    parts = schema.encode_sample({"c": b"\x01\x02\x03", "b": "hé", "a": -2})
    text = "hé".encode()
    assert (
        b"".join(parts)
        == struct.pack("<2I", len(text), 3) + struct.pack("<q", -2) + text + b"\x01\x02\x03"
    )


def test_sample_without_variable_columns_has_no_size_prefix():
    schema = MDSSchema({"a": "int", "b": "uint8"})
    assert b"".join(schema.encode_sample({"a": 1, "b": 2})) == struct.pack("<qB", 1, 2)


def test_decode_sample_round_trips():
    schema = MDSSchema(COLUMNS)
    for i in range(4):
        assert_sample_equal(
            schema.decode_sample(b"".join(schema.encode_sample(sample(i)))), sample(i)
        )


def test_missing_column_names_it():
    schema = MDSSchema(COLUMNS)
    partial = sample(1)
    del partial["text"]
    with pytest.raises(MissingColumnError, match=r"sample has no column 'text'") as info:
        schema.encode_sample(partial)
    assert isinstance(info.value, KeyError)


def test_wrong_value_names_the_column():
    schema = MDSSchema(COLUMNS)
    with pytest.raises(
        SampleEncodingError, match=r"column 'text': encoding 'str' expects str.*got bytes"
    ):
        schema.encode_sample({**sample(1), "text": b"bytes"})
    with pytest.raises(
        SampleEncodingError, match=r"column 'id': encoding 'int' expects int.*got bytes"
    ):
        schema.encode_sample({**sample(1), "id": b"\x00" * 8})


class Sloppy(Encoding):
    """Claims 4 bytes, writes however many the value has."""

    size = 4

    def encode(self, value: Any) -> bytes:
        return bytes(value)

    def decode(self, data: Any) -> bytes:
        return bytes(data)


@pytest.mark.usefixtures("isolated_registry")
def test_fixed_size_mismatch_names_the_column():
    register_encoding("sloppy", lambda name, arg: Sloppy(name))
    schema = MDSSchema({"col": "sloppy"})
    assert schema.decode_sample(b"".join(schema.encode_sample({"col": b"abcd"}))) == {
        "col": b"abcd"
    }
    with pytest.raises(
        SampleEncodingError, match="column 'col': encoding 'sloppy' is 4 bytes, got 3"
    ):
        schema.encode_sample({"col": b"abc"})


def test_decode_sample_checks_the_length():
    schema = MDSSchema({"a": "int", "b": "str"})
    data = b"".join(schema.encode_sample({"a": 1, "b": "xyz"}))
    with pytest.raises(
        ShardFormatError,
        match=f"sample is {len(data) + 1} bytes but its columns add up to {len(data)}",
    ):
        schema.decode_sample(data + b"!")
    with pytest.raises(ShardFormatError, match="add up to"):
        schema.decode_sample(data[:-1])


def test_check_safe_refuses_pickle_columns():
    schema = MDSSchema({"obj": "pkl", "x": "int"})
    with pytest.raises(
        UnsafeEncodingError,
        match=r"ds/index.json: column 'obj' uses the 'pkl' encoding.*allow_unsafe_types=True",
    ):
        schema.check_safe(False, source="ds/index.json")
    schema.check_safe(True, source="ds/index.json")
    MDSSchema({"x": "int"}).check_safe(False, source="ds/index.json")


def test_schema_pickles():
    schema = MDSSchema({"z": "int", "a": "str", "v": "ndarray"}, sort=False)
    copy = pickle.loads(pickle.dumps(schema))
    assert copy.names == ["z", "a", "v"]
    assert copy.columns == schema.columns
    data = b"".join(schema.encode_sample({"z": 3, "a": "hi", "v": np.arange(2)}))
    decoded = copy.decode_sample(data)
    assert (decoded["z"], decoded["a"], decoded["v"].tolist()) == (3, "hi", [0, 1])


# --- shard header ----------------------------------------------------------------------------


def test_shard_header_layout():
    config = b'{"k": 1}'
    header = shard_header(config, [3, 0, 5])
    start = 4 + 4 * 4 + len(config)
    assert header == struct.pack("<5I", 3, start, start + 3, start + 3, start + 8) + config
    assert len(header) == start


def test_shard_header_without_samples():
    header = shard_header(b"{}", [])
    assert header == struct.pack("<2I", 0, 10) + b"{}"


def test_shard_header_refuses_4_gib():
    config = b"{}"
    overhead = 4 + 4 * 3 + len(config)
    fits = shard_header(config, [2**31, 2**31 - overhead - 1])
    assert struct.unpack_from("<I", fits, 12)[0] == 2**32 - 1
    with pytest.raises(
        ShardTooLargeError, match=rf"a shard of 2 samples would be {2**32} bytes.*32-bit"
    ):
        shard_header(config, [2**31, 2**31 - overhead])


# --- shard view ---------------------------------------------------------------------------------


def test_shard_view_reads_every_sample():
    schema = MDSSchema(COLUMNS)
    samples = [sample(i) for i in range(5)]
    data = build_shard(schema, samples)
    view = MDSShardView(data, schema, 5, source="shard.00000.mds")
    assert len(view) == 5
    for i, expected in enumerate(samples):
        assert_sample_equal(view[i], expected)
        assert bytes(view.sample_bytes(i)) == b"".join(schema.encode_sample(expected))


def test_shard_view_over_mmap_and_bytearray(tmp_path):
    schema = MDSSchema({"x": "int", "s": "str"})
    data = build_shard(schema, [{"x": i, "s": str(i)} for i in range(3)])
    path = tmp_path / "shard.00000.mds"
    path.write_bytes(data)
    with (
        path.open("rb") as handle,
        mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
    ):
        view = MDSShardView(mapped, schema, 3, source=str(path))
        assert [view[i] for i in range(3)] == [{"x": i, "s": str(i)} for i in range(3)]
        view.release()
    assert MDSShardView(bytearray(data), schema, 3, source="b")[2] == {"x": 2, "s": "2"}


def test_empty_shard():
    schema = MDSSchema({"x": "int"})
    view = MDSShardView(build_shard(schema, []), schema, 0, source="empty")
    assert len(view) == 0


def corrupt(data: bytes, position: int, value: int) -> bytes:
    return data[:position] + struct.pack("<I", value) + data[position + 4 :]


@pytest.fixture
def shard() -> tuple[MDSSchema, bytes]:
    schema = MDSSchema({"x": "int", "s": "str"})
    return schema, build_shard(schema, [{"x": i, "s": "v" * i} for i in range(4)])


def expect_corrupt(schema: MDSSchema, data: bytes, message: str, samples: int = 4) -> None:
    with pytest.raises(ShardFormatError, match=re.escape("/ds/shard.00007.mds: ") + message):
        MDSShardView(data, schema, samples, source="/ds/shard.00007.mds")


def test_too_short(shard: tuple[MDSSchema, bytes]):
    schema, data = shard
    expect_corrupt(schema, data[:7], "7 bytes is too short for an MDS shard")
    expect_corrupt(schema, b"", "0 bytes is too short")


def test_sample_count_disagrees_with_the_index(shard: tuple[MDSSchema, bytes]):
    schema, data = shard
    expect_corrupt(schema, data, "the shard holds 4 samples but index.json says 5", samples=5)


def test_truncated_offset_table(shard: tuple[MDSSchema, bytes]):
    schema, data = shard
    expect_corrupt(schema, data[:12], r"truncated offset table \(12 bytes\)")


def test_truncated_file(shard: tuple[MDSSchema, bytes]):
    schema, data = shard
    expect_corrupt(schema, data[:-1], "corrupt offset table")


def test_last_offset_beyond_the_file(shard: tuple[MDSSchema, bytes]):
    schema, data = shard
    expect_corrupt(schema, corrupt(data, 4 + 4 * 4, len(data) + 10), "corrupt offset table")


def test_first_offset_inside_the_header(shard: tuple[MDSSchema, bytes]):
    schema, data = shard
    expect_corrupt(schema, corrupt(data, 4, 8), r"corrupt offset table \(first 8")


def test_decreasing_offsets(shard: tuple[MDSSchema, bytes]):
    schema, data = shard
    (second,) = struct.unpack_from("<I", data, 8)
    expect_corrupt(schema, corrupt(data, 12, second - 1), "corrupt offset table")


def test_corrupt_sample_sizes_name_the_sample(shard: tuple[MDSSchema, bytes]):
    schema, data = shard
    (start,) = struct.unpack_from("<I", data, 4 + 4 * 2)  # sample 2 begins with the size of 's'
    broken = corrupt(data, start, 1000)
    view = MDSShardView(broken, schema, 4, source="/ds/shard.00007.mds")
    assert view[1] == {"x": 1, "s": "v"}
    with pytest.raises(ShardFormatError, match=r"/ds/shard.00007.mds, sample 2: cannot decode"):
        view[2]


def test_corrupt_text_is_a_shard_format_error(shard: tuple[MDSSchema, bytes]):
    schema, data = shard
    (start,) = struct.unpack_from("<I", data, 4 + 4 * 3)  # sample 3: size of s, "vvv", x
    broken = data[: start + 4] + b"\xff" + data[start + 5 :]
    with pytest.raises(ShardFormatError, match="sample 3: cannot decode"):
        MDSShardView(broken, schema, 4, source="s")[3]


def test_shard_view_negative_and_out_of_range_indices(shard: tuple[MDSSchema, bytes]):
    schema, data = shard
    view = MDSShardView(data, schema, 4, source="/ds/shard.00007.mds")
    assert view[-1] == view[3] == {"x": 3, "s": "vvv"}
    assert view[-4] == view.get(0) == {"x": 0, "s": ""}
    with pytest.raises(IndexError):
        view[4]
    with pytest.raises(IndexError, match=r"/ds/shard\.00007\.mds"):
        view[-5]
