"""Hypothesis properties: encodings, writer -> reader, shard splitting and index.json round-trip."""

from __future__ import annotations

import math
import os
import pickle
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from PIL import Image

from shardstream import LocalDataset, MDSWriter, get_encoding
from shardstream.errors import SampleEncodingError
from shardstream.format.compression import get_compression
from shardstream.format.encodings.ndarray import DTYPE_CODES
from shardstream.format.index import FileInfo, ShardEntry, dump_index, most_samples, parse_index
from shardstream.format.mds import MDSSchema, MDSShardView

SETTINGS = settings(max_examples=60, deadline=None)
FEW = settings(max_examples=30, deadline=None)

DTYPES = sorted(DTYPE_CODES)
INTEGER_DTYPES = [d for d in DTYPES if not d.startswith("float")]
FLOAT_DTYPES = [d for d in DTYPES if d.startswith("float")]


def roundtrip(spec: str, value: Any) -> Any:
    encoding = get_encoding(spec)
    data = encoding.encode(value)
    if encoding.size is not None:
        assert len(data) == encoding.size
    return encoding.decode(memoryview(data))


def same_float(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


# --- scalar encodings -------------------------------------------------------------------------


@SETTINGS
@given(st.integers(-(2**63), 2**63 - 1))
def test_int(value: int):
    decoded = roundtrip("int", value)
    assert type(decoded) is int
    assert decoded == value


@SETTINGS
@given(st.sampled_from(INTEGER_DTYPES).flatmap(lambda d: hnp.from_dtype(np.dtype(d))))
def test_int_from_numpy_integers(value: np.integer[Any]):
    if -(2**63) <= int(value) < 2**63:
        assert roundtrip("int", value) == int(value)
    else:
        with pytest.raises(SampleEncodingError, match=f"{int(value)} is out of range"):
            get_encoding("int").encode(value)


@SETTINGS
@given(st.data())
def test_numeric_scalars_within_range(data: st.DataObject):
    name = data.draw(st.sampled_from(DTYPES))
    dtype = np.dtype(name)
    if name in INTEGER_DTYPES:
        info = np.iinfo(dtype)
        value: Any = data.draw(st.integers(int(info.min), int(info.max)) | hnp.from_dtype(dtype))
    else:
        widths: dict[str, Literal[16, 32, 64]] = {"float16": 16, "float32": 32, "float64": 64}
        value = data.draw(hnp.from_dtype(dtype) | st.floats(width=widths[name]))
    decoded = roundtrip(name, value)
    assert decoded.dtype == dtype
    if name in INTEGER_DTYPES:
        assert int(decoded) == int(value)
    else:
        assert same_float(float(decoded), float(dtype.type(value)))


@SETTINGS
@given(st.text())
def test_str(value: str):
    assert roundtrip("str", value) == value


@SETTINGS
@given(st.binary())
def test_bytes(value: bytes):
    assert roundtrip("bytes", value) == value


@SETTINGS
@given(st.integers(min_value=-(10**80), max_value=10**80) | st.integers())
def test_str_int(value: int):
    assert roundtrip("str_int", value) == value


@SETTINGS
@given(st.floats())
def test_str_float(value: float):
    decoded = roundtrip("str_float", value)
    assert same_float(decoded, value)
    assert math.copysign(1, decoded) == math.copysign(1, value) or math.isnan(value)


@SETTINGS
@given(st.decimals(allow_nan=False))
def test_str_decimal(value: Decimal):
    decoded = roundtrip("str_decimal", value)
    assert decoded == value
    assert str(decoded) == str(value)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


@SETTINGS
@given(JSON)
def test_json(value: Any):
    assert roundtrip("json", value) == value


@SETTINGS
@given(
    st.recursive(
        st.none() | st.integers() | st.text() | st.binary(),
        lambda c: st.lists(c) | st.tuples(c, c) | st.frozensets(st.integers()),
    )
)
def test_pkl(value: Any):
    assert roundtrip("pkl", value) == value


# --- ndarray -------------------------------------------------------------------------------


ARRAYS = st.sampled_from(DTYPES).flatmap(
    lambda d: hnp.arrays(
        np.dtype(d), hnp.array_shapes(min_dims=1, max_dims=5, min_side=1, max_side=7)
    )
)


def assert_same_array(decoded: np.ndarray[Any, Any], value: np.ndarray[Any, Any]) -> None:
    assert decoded.dtype.name == value.dtype.name
    assert decoded.shape == value.shape
    assert decoded.tobytes() == value.astype(value.dtype.newbyteorder("<")).tobytes()


@SETTINGS
@given(ARRAYS, st.sampled_from(["dynamic", "dtype", "dtype+shape"]))
def test_ndarray(value: np.ndarray[Any, Any], static: str):
    spec = "ndarray"
    if static != "dynamic":
        spec += f":{value.dtype.name}"
    if static == "dtype+shape":
        spec += ":" + ",".join(map(str, value.shape))
    data = get_encoding(spec).encode(value)
    header = (static != "dtype+shape") * (1 + value.ndim * 1) + (static == "dynamic")
    assert len(data) == header + value.nbytes  # every side < 256: a uint8 per dimension
    if static == "dynamic":
        assert data[0] == DTYPE_CODES[value.dtype.name]
    if static != "dtype+shape":
        assert data[int(static == "dynamic")] == value.ndim << 2
    assert_same_array(roundtrip(spec, value), value)


@SETTINGS
@given(
    st.sampled_from(DTYPES),
    hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5),
    st.sampled_from(["<", ">"]),
    st.booleans(),
)
def test_ndarray_any_byte_order_and_layout(
    name: str, shape: tuple[int, ...], order: Literal["<", ">"], transpose: bool
):
    value = np.arange(int(np.prod(shape)), dtype=np.dtype(name).newbyteorder(order)).reshape(shape)
    if transpose:
        value = value.T
    decoded = roundtrip("ndarray", value)
    assert decoded.shape == value.shape
    np.testing.assert_array_equal(decoded, value)


# --- images --------------------------------------------------------------------------------------


IMAGES = st.sampled_from(["L", "RGB", "RGBA"]).flatmap(
    lambda mode: hnp.arrays(
        np.uint8,
        st.tuples(st.integers(1, 8), st.integers(1, 8)).map(
            lambda hw: hw + ({"L": (), "RGB": (3,), "RGBA": (4,)}[mode])
        ),
    ).map(lambda pixels: Image.fromarray(pixels, mode))
)


def same_image(a: Image.Image, b: Image.Image) -> bool:
    return (a.mode, a.size, a.tobytes()) == (b.mode, b.size, b.tobytes())


@SETTINGS
@given(IMAGES)
def test_pil(img: Image.Image):
    assert same_image(roundtrip("pil", img), img)


@SETTINGS
@given(IMAGES)
def test_png(img: Image.Image):
    assert same_image(roundtrip("png", img), img)


@FEW
@given(st.lists(IMAGES, max_size=4))
def test_list_of_png(images: list[Image.Image]):
    decoded = roundtrip("list[png]", images)
    assert len(decoded) == len(images)
    assert all(same_image(a, b) for a, b in zip(decoded, images, strict=True))


# --- writer -> LocalDataset ---------------------------------------------------------------------


COLUMN_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "int": st.integers(-(2**63), 2**63 - 1),
    "str": st.text(max_size=30),
    "bytes": st.binary(max_size=60),
    "uint16": st.integers(0, 2**16 - 1),
    "float32": st.floats(width=32, allow_nan=False),
    "str_int": st.integers(),
    "json": JSON,
    "ndarray": hnp.arrays(np.int32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=4)),
    "ndarray:float64": hnp.arrays(
        np.float64, hnp.array_shapes(max_dims=2, max_side=4), elements=st.floats(allow_nan=False)
    ),
    "ndarray:uint8:2,3": hnp.arrays(np.uint8, (2, 3)),
}
NAMES = st.text(alphabet="abcdefgh_", min_size=1, max_size=6)


@st.composite
def datasets(draw: st.DrawFn) -> tuple[dict[str, str], list[dict[str, Any]]]:
    columns = draw(
        st.dictionaries(NAMES, st.sampled_from(sorted(COLUMN_VALUES)), min_size=1, max_size=4)
    )
    samples = draw(
        st.lists(
            st.fixed_dictionaries({name: COLUMN_VALUES[enc] for name, enc in columns.items()}),
            min_size=draw(st.sampled_from([0, 1, 5])),
            max_size=25,
        )
    )
    return columns, samples


def same_value(decoded: Any, value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return (
            decoded.dtype == value.dtype
            and decoded.shape == value.shape
            and np.array_equal(decoded, value)
        )
    if isinstance(decoded, np.generic):
        return bool(decoded == value)
    return bool(decoded == value)


def stored_shards(folder: Path, ds: LocalDataset) -> list[bytes]:
    """The uncompressed bytes of every shard file of a dataset."""
    shards = []
    for entry in ds.shards:
        stored = (folder / entry.data_file.basename).read_bytes()
        shards.append(
            stored
            if entry.compression is None
            else get_compression(entry.compression).decompress(stored)
        )
    return shards


@settings(max_examples=50, deadline=None)
@given(
    datasets(),
    st.integers(300, 2500) | st.integers(1, 300) | st.just(None),
    st.sampled_from([None, "zstd", "zstd:9", "gz:1", "bz2", "br:2", "snappy"]),
    st.sampled_from([[], ["sha1"], ["md5", "xxh64"]]),
)
def test_writer_reader_round_trip(
    tmp_path_factory: pytest.TempPathFactory,
    dataset: tuple[dict[str, str], list[dict[str, Any]]],
    size_limit: int | None,
    compression: str | None,
    hashes: list[str],
):
    columns, samples = dataset
    folder = tmp_path_factory.mktemp("ds")
    with MDSWriter(
        out=folder,
        columns=columns,
        size_limit=size_limit,
        compression=compression,
        hashes=hashes,
        exist_ok=True,
    ) as writer:
        for sample in samples:
            writer.write(sample)
    ds = LocalDataset(
        folder,
        cache_dir=tmp_path_factory.mktemp("cache"),
        validate_hash=hashes[0] if hashes else None,
    )
    assert len(ds) == len(samples)
    for got, expected in zip(ds, samples, strict=True):
        assert got.keys() == expected.keys()
        assert all(same_value(got[k], v) for k, v in expected.items()), (got, expected)
    if samples:
        k = len(samples) // 2
        assert all(same_value(ds[k][c], samples[k][c]) for c in columns)
        copy = pickle.loads(pickle.dumps(ds))
        assert all(same_value(copy[-1][c], samples[-1][c]) for c in columns)
    for entry in ds.shards:
        assert entry.compression == compression
        assert list(entry.columns) == sorted(columns)
        assert entry.samples >= 1


@SETTINGS
@given(
    st.lists(st.binary(max_size=300), min_size=1, max_size=40),
    st.integers(250, 3000) | st.integers(1, 250),
)
def test_shards_respect_the_size_limit(
    tmp_path_factory: pytest.TempPathFactory, blobs: list[bytes], size_limit: int
):
    folder = tmp_path_factory.mktemp("ds")
    with MDSWriter(out=folder, columns={"b": "bytes", "i": "int"}, size_limit=size_limit) as writer:
        for i, blob in enumerate(blobs):
            writer.write({"b": blob, "i": i})
    ds = LocalDataset(folder)
    shards = stored_shards(folder, ds)
    assert len(shards) == len(ds.shards)
    first_sample_sizes = []
    for entry, raw in zip(ds.shards, shards, strict=True):
        assert len(raw) == entry.raw_data.bytes == os.path.getsize(folder / entry.raw_data.basename)
        assert len(raw) <= size_limit or entry.samples == 1
        view = MDSShardView(raw, MDSSchema(entry.columns, sort=False), entry.samples, source="test")
        first_sample_sizes.append(len(view.sample_bytes(0)))
    # Greedy: a new shard starts only when the next sample (and its offset) would not fit.
    for k in range(len(shards) - 1):
        assert len(shards[k]) + 4 + first_sample_sizes[k + 1] > size_limit
    assert [s["i"] for s in ds] == list(range(len(blobs)))
    assert [s["b"] for s in ds] == blobs


# --- index.json -----------------------------------------------------------------------------------


HEX = st.text(alphabet="0123456789abcdef", min_size=8, max_size=40)
BASENAMES = st.builds(
    lambda folder, number: f"{folder}shard.{number:05}.mds",
    st.sampled_from(["", "0/", "7/", "a/b/"]),
    st.integers(0, 10**6),
)
FILES = st.builds(
    FileInfo,
    BASENAMES,
    st.integers(0, 2**40),
    st.dictionaries(st.sampled_from(["md5", "sha1", "xxh64"]), HEX),
)
ENCODINGS = st.sampled_from(["int", "str", "bytes", "uint8", "ndarray:float32:2,3", "json", "png"])


@st.composite
def shard_entries(draw: st.DrawFn) -> ShardEntry:
    columns = draw(
        st.dictionaries(st.text(min_size=1, max_size=8), ENCODINGS, min_size=1, max_size=5)
    )
    compression = draw(st.none() | st.sampled_from(["zstd", "zstd:7", "gz", "br:4", "snappy"]))
    raw = draw(FILES)
    zipped = None if compression is None else draw(FILES)
    return ShardEntry(
        format="mds",
        # What its offset table holds, and a uint32 count can say.
        samples=draw(st.integers(0, min(most_samples(raw.bytes), 2**32 - 1))),
        raw_data=raw,
        zip_data=zipped,
        compression=compression,
        hashes=tuple(
            draw(st.lists(st.sampled_from(["md5", "sha1", "xxh64"]), unique=True).map(sorted))
        ),
        size_limit=draw(st.none() | st.integers(1, 2**32 - 1)),
        columns=columns,
        column_sizes=tuple(draw(st.none() | st.integers(0, 64)) for _ in columns),
    )


@SETTINGS
@given(st.lists(shard_entries(), max_size=5))
def test_index_parse_of_dump(entries: list[ShardEntry]):
    data = dump_index(entries)
    parsed = parse_index(data, source="index.json")
    assert parsed == entries
    assert [list(e.columns) for e in parsed] == [list(e.columns) for e in entries]
    assert dump_index(parsed) == data
