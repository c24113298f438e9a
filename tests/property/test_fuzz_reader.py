"""Fuzzing the reader: corrupt index.json and shard files are untrusted input.

Reading a corrupted dataset with :class:`LocalDataset` may only raise shardstream's own errors
(or ``IndexError`` for a sample id out of range); it must never leak a builtin or numpy error,
crash, hang, or return a sample that the shard's header and index.json do not support.

Each Hypothesis example works on a fresh copy of a pristine dataset built once per module.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
import traceback
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings
from hypothesis import strategies as st
from tests.spec import MDS_KEYS

from shardstream import LocalDataset, MDSWriter, get_encoding
from shardstream.errors import (
    ChecksumError,
    IndexFormatError,
    ShardFormatError,
    ShardstreamError,
)
from shardstream.format.mds import MDSSchema, shard_header
from shardstream.pipeline.policy import ReadPolicy

# SHARDSTREAM_FUZZ_EXAMPLES=5000 fuzzes longer than the default run does.
FUZZ = settings(
    max_examples=int(os.environ.get("SHARDSTREAM_FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

COLUMNS = {
    "a": "ndarray",
    "b": "bytes",
    "f": "ndarray:float32:3",
    "i": "int",
    "j": "json",
    "n": "str_int",
    "s": "str",
    "u": "uint16",
}
SAMPLES = 10


def make_sample(k: int) -> dict[str, Any]:
    dtype = (np.int16, np.float64, np.uint8)[k % 3]
    array = np.arange(k % 4 + 1, dtype=dtype) * (k + 1)
    return {
        "a": array.reshape(-1, 1) if k % 2 else array,
        "b": bytes(range(k % 5)),
        "f": np.array([k, k / 2, -k], np.float32),
        "i": k * 7 - 20,
        "j": {"k": k, "l": [k, None, "x" * k]},
        "n": 10**20 + k,
        "s": "é" * (k % 3) + f"s{k}",
        "u": np.uint16(k * 1000),
    }


def canon(sample: dict[str, Any]) -> tuple[Any, ...]:
    """A hashable form of a sample: equal exactly when every value, type and dtype is equal."""
    items: list[tuple[Any, ...]] = []
    for key in sorted(sample):
        value = sample[key]
        if isinstance(value, np.ndarray):
            items.append((key, "array", value.dtype.str, value.shape, value.tobytes()))
        elif isinstance(value, np.generic):
            items.append((key, "scalar", value.dtype.str, value.tobytes()))
        else:
            items.append((key, type(value).__name__, repr(value)))
    return tuple(items)


EXPECTED = [canon(make_sample(k)) for k in range(SAMPLES)]


@dataclass(frozen=True)
class Template:
    """A pristine dataset folder and what is known about it."""

    path: Path
    index: dict[str, Any]
    files: list[str]  # the stored file of each shard, in index order
    starts: list[int]  # the id of each shard's first sample


def _write(path: Path, **kwargs: Any) -> Template:
    with MDSWriter(out=path, columns=COLUMNS, **kwargs) as writer:
        for k in range(SAMPLES):
            writer.write(make_sample(k))
    index = json.loads((path / "index.json").read_text())
    files = [(s["zip_data"] or s["raw_data"])["basename"] for s in index["shards"]]
    counts = [s["samples"] for s in index["shards"]]
    starts = [sum(counts[:k]) for k in range(len(counts))]
    return Template(path, index, files, starts)


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Template]:
    root = tmp_path_factory.mktemp("fuzz-templates")
    plain = _write(root / "plain", size_limit=900, hashes=["sha1", "xxh64"])
    packed = _write(root / "zstd", size_limit=900, compression="zstd", hashes=["sha1"])
    assert len(plain.files) >= 3, plain.index
    assert len(packed.files) >= 2, packed.index
    split = _write_split(root / "split")
    # The templates are never read in place: a compressed read would leave a cache beside them.
    return {"plain": plain, "zstd": packed, "split": split}


def _split_lines(fmt: str) -> list[bytes]:
    if fmt == "json":
        return [json.dumps({"id": i, "text": f"t{i}"}).encode() + b"\n" for i in range(4)]
    return [f"{i},{i / 4},t{i}\n".encode() for i in range(4)]


def _split_files(lines: list[bytes]) -> tuple[bytes, bytes]:
    """A split shard's data file and its .meta file (count, offsets, config)."""
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    meta = struct.pack(f"<{len(offsets) + 1}I", len(lines), *offsets) + b"{}"
    return b"".join(lines), meta


def _split_entry(fmt: str, number: int, data: bytes, meta: bytes, count: int) -> dict[str, Any]:
    name = f"shard.{number:05d}.{fmt}"
    entry: dict[str, Any] = {
        "compression": None,
        "format": fmt,
        "hashes": [],
        "newline": "\n",
        "raw_data": {"basename": name, "bytes": len(data), "hashes": {}},
        "raw_meta": {"basename": name + ".meta", "bytes": len(meta), "hashes": {}},
        "samples": count,
        "size_limit": None,
        "version": 2,
        "zip_data": None,
        "zip_meta": None,
    }
    if fmt == "json":
        entry["columns"] = {"id": "int", "text": "str"}
    else:
        entry["column_names"] = ["id", "score", "text"]
        entry["column_encodings"] = ["int", "float", "str"]
    return entry


def _write_split(path: Path) -> Template:
    """A dataset of a json shard and a csv shard, as the reference's split writers lay them out."""
    path.mkdir()
    shards = []
    for number, fmt in enumerate(["json", "csv"]):
        lines = _split_lines(fmt)
        data, meta = _split_files(lines)
        entry = _split_entry(fmt, number, data, meta, len(lines))
        (path / entry["raw_data"]["basename"]).write_bytes(data)
        (path / entry["raw_meta"]["basename"]).write_bytes(meta)
        shards.append(entry)
    index = {"shards": shards, "version": 2}
    (path / "index.json").write_text(json.dumps(index))
    files = [entry["raw_data"]["basename"] for entry in shards]
    return Template(path, index, files, [0, 4])


@contextmanager
def fresh(template: Template) -> Iterator[Path]:
    """A private copy of a template dataset, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="shardstream-fuzz-") as tmp:
        path = Path(tmp) / "ds"
        shutil.copytree(template.path, path)
        yield path


Read = dict[str, Any] | ShardstreamError  # a sample, or the error reading it raised


def reading(pread: bool, zero_copy: bool = False) -> ReadPolicy:
    """With ``pread``, every shard is read as shards of large samples are (MDSFileView)."""
    policy = ReadPolicy(zero_copy=zero_copy)
    return policy.replace(read_whole_bytes=0, pread_mean_bytes=0) if pread else policy


def read_everything(path: Path, **kwargs: Any) -> list[Read]:
    """Open a dataset, take its length and read every sample by id; check ids out of range.

    A sample that raises a shardstream error is recorded as that error and the next is read, so
    one corrupt sample does not hide the rest. When all read, iterate too, which also opens the
    shards that hold no sample (ids never reach them).
    """
    pread = kwargs.pop("pread", False)
    kwargs["policy"] = reading(pread, kwargs.get("zero_copy", False))
    with LocalDataset(path, **kwargs) as ds:
        total = len(ds)
        # An index may claim billions of samples: then read the first and last thousand.
        ids = range(total) if total <= 2000 else [*range(1000), *range(total - 1000, total)]
        results = [read_one(ds, i) for i in ids]
        for bad in (total, -total - 1):
            try:
                ds[bad]
            except IndexError:
                continue
            raise AssertionError(f"ds[{bad}] of {total} samples did not raise IndexError")
    if not errors_in(results):
        with LocalDataset(path, **kwargs) as ds:
            iterated = list(ds)
        assert normalized(iterated) == normalized(results), "iterating and indexing disagree"
    return results


def read_one(ds: LocalDataset, sample_id: int) -> Read:
    try:
        return ds[sample_id]
    except ShardstreamError as exc:
        # Without its traceback, the error does not keep the failed shard's memory map open.
        return exc.with_traceback(None)


def errors_in(results: list[Read]) -> list[ShardstreamError]:
    return [r for r in results if isinstance(r, ShardstreamError)]


def raised(result: list[Read] | ShardstreamError) -> list[ShardstreamError]:
    """Every error of an :func:`attempt`: the one that stopped it, or those of its samples."""
    return [result] if isinstance(result, ShardstreamError) else errors_in(result)


def note_outcome(outcome: str) -> None:
    if currently_in_test_context():  # shown by pytest --hypothesis-show-statistics
        event(outcome)


def attempt(path: Path, mutation: str, **kwargs: Any) -> list[Read] | ShardstreamError:
    """Read everything: the samples (or their errors), or the error that stopped the reading.

    Any exception that is not a shardstream error fails the test, naming the mutation.
    """
    try:
        results = read_everything(path, **kwargs)
    except ShardstreamError as exc:
        note_outcome(f"raised {type(exc).__name__}")
        return exc
    except Exception as exc:  # noqa: BLE001 - any other exception is the bug we look for
        pytest.fail(
            f"reading a dataset mutated by {mutation} (options {kwargs}) raised "
            f"{type(exc).__name__}, which is not a shardstream error: {exc}\n"
            + "".join(traceback.format_exception(exc)),
            pytrace=False,
        )
    errors = errors_in(results)
    note_outcome(
        f"some samples raised {type(errors[0]).__name__}" if errors else "read every sample"
    )
    return results


def read_options() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "zero_copy": st.booleans(),
            "pread": st.booleans(),
            "validate_hash": st.just("sha1"),
        },
    )


def normalized(samples: Sequence[Read]) -> list[tuple[Any, ...] | None]:
    """Each sample in canonical form (None for an error)."""
    return [
        None
        if isinstance(s, ShardstreamError)
        else canon({k: bytes(v) if isinstance(v, memoryview) else v for k, v in s.items()})
        for s in samples
    ]


# --- index.json: bytes ----------------------------------------------------------------------------

INTERESTING_BYTES = st.sampled_from(
    [b"\x00", b"\xff", b"\\", b'"', b"[", b"{", b"}", b"9" * 12, b"-", b",", b"\xc3", b"null"]
)
INDEX_BYTE_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("flip"), st.integers(0, 1 << 20), st.integers(1, 255)),
        st.tuples(st.just("truncate"), st.integers(0, 1 << 20)),
        st.tuples(
            st.just("insert"),
            st.integers(0, 1 << 20),
            INTERESTING_BYTES | st.binary(min_size=1, max_size=8),
        ),
    ),
    min_size=1,
    max_size=4,
)


def apply_byte_ops(data: bytes, ops: list[tuple[Any, ...]]) -> bytes:
    buffer = bytearray(data)
    for op in ops:
        position = op[1] % (len(buffer) + 1)
        if op[0] == "flip" and buffer:
            buffer[position % len(buffer)] ^= op[2]
        elif op[0] == "truncate":
            del buffer[position:]
        elif op[0] == "insert":
            buffer[position:position] = op[2]
    return bytes(buffer)


@FUZZ
@given(which=st.sampled_from(["plain", "zstd"]), ops=INDEX_BYTE_OPS, options=read_options())
def test_index_json_byte_mutations(templates, which, ops, options):
    template = templates[which]
    with fresh(template) as path:
        index_path = path / "index.json"
        index_path.write_bytes(apply_byte_ops(index_path.read_bytes(), ops))
        attempt(path, f"index.json byte ops {ops}", **options)


# --- index.json: structure ------------------------------------------------------------------------

HUGE = "\x00HUGE\x00"  # replaced by a 5000-digit number in the JSON text
DEEP = "\x00DEEP\x00"  # replaced by 50000 nested arrays

SPECIAL_NUMBERS = st.sampled_from(
    [0, -1, 1, 2**31, 2**32 - 1, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63), 10**30]
)
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    SPECIAL_NUMBERS,
    st.floats(),
    st.text(max_size=12),
    st.sampled_from([HUGE, DEEP]),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=6,
)
EVIL_BASENAMES = st.sampled_from(
    [
        "",
        ".",
        "..",
        "../shard.00000.mds",
        "a/../../b",
        "/etc/passwd",
        "C:\\x",
        "C:x",
        "sub\\shard.00000.mds",
        "shard\x00.mds",
        "x" * 300,
        "a/" * 2100 + "b",
        "\ud800",
        "\udcff",
        "./shard.00000.mds",
        "a//b",
        "index.json",
        "shard.00000.mds",
        "shard.00001.mds",
        "shard.00000.mds.zstd",
        "shard.00000.mds/inner",
        "missing/shard.mds",
        "é.mds",
        "\n",
    ]
)
ENCODINGS = st.sampled_from(
    [
        "int",
        "str",
        "bytes",
        "ndarray",
        "ndarray:float32:3",
        "ndarray:uint8",
        "ndarray:int64:2,2",
        "ndarray:uint8:4294967296,4294967296",
        "ndarray:uint8:3,6148914691236517206",
        "uint16",
        "uint8",
        "int32",
        "float64",
        "float16",
        "json",
        "str_int",
        "str_float",
        "str_decimal",
        "pkl",
        "pil",
        "jpeg",
        "png",
        "list[pil]",
        "list[jpeg]",
        "jpeg_array",
        "",
        "nope",
        "int:3",
        "ndarray:float128",
        "ndarray:uint8:0",
        "ndarray:uint8:-1",
        "ndarray:uint8:x",
        "ndarray:uint8:" + "9" * 5000,
        "ndarray:a:b:c",
        "ndarray::3",
        "list[",
    ]
)
COMPRESSION_NAMES = st.sampled_from(
    [
        None,
        "",
        "zstd",
        "zstd:22",
        "zstd:23",
        "zstd:0",
        "zstd:-1",
        "zstd:\u00b2",
        "zstd:\u0663",
        "zstd:" + "9" * 5000,
        "zstd:",
        "gz",
        "gz:9",
        "bz2",
        "br",
        "snappy",
        "snappy:1",
        "nope",
        ":",
    ]
)
SHARD_KEYS = sorted(MDS_KEYS)


def dump_with_specials(obj: Any) -> bytes:
    text = json.dumps(obj)
    text = text.replace(json.dumps(HUGE), "1" * 5000)
    text = text.replace(json.dumps(DEEP), "[" * 50000 + "]" * 50000)
    return text.encode("utf-8")


def json_paths(obj: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a value inside a JSON document (the root excluded)."""
    if isinstance(obj, dict):
        children: list[tuple[Any, Any]] = list(obj.items())
    elif isinstance(obj, list):
        children = list(enumerate(obj))
    else:
        return
    for key, value in children:
        yield (*prefix, key)
        yield from json_paths(value, (*prefix, key))


def value_at(obj: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        obj = obj[key]
    return obj


def container(obj: Any, path: tuple[Any, ...]) -> Any:
    return value_at(obj, path[:-1])


def size_of(spec: str) -> int | None:
    try:
        return MDSSchema({"x": spec}).sizes[0]
    except ShardstreamError:
        return None


def mutate_index(data: st.DataObject, index: dict[str, Any]) -> list[str]:
    """Apply 1-3 structured mutations to ``index`` in place; return their descriptions."""
    done = []
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        shards = index.get("shards")
        shard: Any = None
        if isinstance(shards, list) and shards:
            number = data.draw(st.integers(0, len(shards) - 1), label="shard")
            shard = shards[number]
        kinds = ["set", "delete", "add"]
        if isinstance(shard, dict):
            kinds += ["basename", "encoding", "samples", "swap", "sizes", "compression"]
        kind = data.draw(st.sampled_from(kinds), label="kind")
        paths = list(json_paths(index))
        if kind == "set" and paths:
            path = data.draw(st.sampled_from(paths), label="path")
            value = data.draw(JSON_VALUES, label="value")
            container(index, path)[path[-1]] = value
            done.append(f"set {path} = {value!r}")
        elif kind == "delete" and paths:
            path = data.draw(st.sampled_from(paths), label="path")
            del container(index, path)[path[-1]]
            done.append(f"delete {path}")
        elif kind == "add":
            dicts = [()] + [p for p in paths if isinstance(value_at(index, p), dict)]
            path = data.draw(st.sampled_from(dicts), label="dict")
            key = data.draw(st.sampled_from([*SHARD_KEYS, "extra", "basename"]), label="key")
            value = data.draw(JSON_VALUES, label="value")
            value_at(index, path)[key] = value
            done.append(f"add {path} [{key!r}] = {value!r}")
        elif kind == "basename":
            which = data.draw(st.sampled_from(["raw_data", "zip_data"]), label="file")
            name = data.draw(EVIL_BASENAMES, label="basename")
            if isinstance(shard.get(which), dict):
                shard[which]["basename"] = name
                done.append(f"{which}.basename = {name!r}")
        elif kind == "encoding":
            encodings = shard.get("column_encodings")
            if isinstance(encodings, list) and encodings:
                column = data.draw(st.integers(0, len(encodings) - 1), label="column")
                spec = data.draw(ENCODINGS, label="encoding")
                encodings[column] = spec
                sizes = shard.get("column_sizes")
                keep_sizes = data.draw(st.booleans(), label="keep column_sizes consistent")
                if keep_sizes and isinstance(sizes, list) and column < len(sizes):
                    sizes[column] = size_of(spec)
                done.append(f"column_encodings[{column}] = {spec!r} (sizes synced: {keep_sizes})")
        elif kind == "samples":
            current = shard.get("samples")
            base = current if isinstance(current, int) else 0
            value = data.draw(
                st.integers(-3, 3).map(base.__add__) | SPECIAL_NUMBERS, label="samples"
            )
            shard["samples"] = value
            done.append(f"samples = {value!r}")
        elif kind == "swap":
            names = shard.get("column_names")
            if isinstance(names, list) and len(names) > 1:
                a, b = data.draw(
                    st.lists(st.integers(0, len(names) - 1), min_size=2, max_size=2, unique=True),
                    label="columns",
                )
                for key in ("column_names", "column_encodings", "column_sizes"):
                    values = shard.get(key)
                    if isinstance(values, list) and max(a, b) < len(values):
                        values[a], values[b] = values[b], values[a]
                done.append(f"swap columns {a} and {b}")
        elif kind == "compression":
            value = data.draw(COMPRESSION_NAMES, label="compression")
            shard["compression"] = value
            done.append(f"compression = {value!r}")
        elif kind == "sizes":
            value = data.draw(JSON_VALUES | st.integers(0, 64), label="size")
            sizes = shard.get("column_sizes")
            if isinstance(sizes, list) and sizes:
                column = data.draw(st.integers(0, len(sizes) - 1), label="column")
                sizes[column] = value
                done.append(f"column_sizes[{column}] = {value!r}")
    return done


@FUZZ
@given(which=st.sampled_from(["plain", "zstd"]), data=st.data(), options=read_options())
def test_index_json_structured_mutations(templates, which, data, options):
    template = templates[which]
    index = json.loads(json.dumps(template.index))
    mutations = mutate_index(data, index)
    with fresh(template) as path:
        (path / "index.json").write_bytes(dump_with_specials(index))
        attempt(path, f"index.json mutations {mutations}", **options)


def test_changing_a_sample_count_in_the_index_is_always_detected(templates):
    for which in ("plain", "zstd"):
        template = templates[which]
        for number in range(len(template.files)):
            for delta in (-1, 1, 2**20):
                index = json.loads(json.dumps(template.index))
                index["shards"][number]["samples"] += delta
                with fresh(template) as path:
                    (path / "index.json").write_text(json.dumps(index))
                    result = attempt(path, f"{which} shard {number} samples += {delta}")
                errors = raised(result)
                assert errors, (which, number, delta, result)
                # A count no offset table of the shard's size can hold is refused with the index.
                expected = IndexFormatError if delta == 2**20 else ShardFormatError
                assert all(isinstance(e, expected) for e in errors), errors
                if isinstance(result, list):  # what did read is a real sample (ids shift)
                    assert set(normalized(result)) <= {*EXPECTED, None}


# --- shard files ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    count: int
    offsets: list[int]
    header_end: int  # where the config starts

    @classmethod
    def of(cls, data: bytes) -> Layout:
        (count,) = struct.unpack_from("<I", data)
        offsets = list(struct.unpack_from(f"<{count + 1}I", data, 4))
        return cls(count, offsets, 4 + 4 * (count + 1))

    def sample_at(self, position: int) -> int | None:
        for k in range(self.count):
            if self.offsets[k] <= position < self.offsets[k + 1]:
                return k
        return None


REGIONS = ["count", "offsets", "config", "samples", "anywhere"]
SHARD_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("flip"),
            st.sampled_from(REGIONS),
            st.integers(0, 1 << 20),
            st.integers(1, 255),
        ),
        st.tuples(st.just("truncate"), st.integers(0, 1 << 20)),
        st.tuples(st.just("extend"), st.binary(min_size=1, max_size=16)),
        st.tuples(
            st.just("offset"),
            st.integers(0, 1 << 10),
            st.sampled_from(["huge", "zero", "size", "size+1", "+1", "-1", "header", "random"]),
            st.integers(0, 2**32 - 1),
        ),
        st.tuples(
            st.just("count"),
            st.sampled_from([0, 1, 2**31, 2**32 - 1, 2**30, -1, +1, 7]),
        ),
    ),
    min_size=1,
    max_size=3,
)


def apply_shard_ops(data: bytes, ops: list[tuple[Any, ...]]) -> tuple[bytes, bool, set[int]]:
    """Mutate a shard.

    Returns its bytes, whether the header changed, and the samples whose own bytes (but not
    their offsets) were flipped.
    """
    layout = Layout.of(data)
    buffer = bytearray(data)
    touched: set[int] = set()
    for op in ops:
        if op[0] == "flip":
            _, region, where, xor = op
            start, stop = {
                "count": (0, 4),
                "offsets": (4, layout.header_end),
                "config": (layout.header_end, layout.offsets[0]),
                "samples": (layout.offsets[0], len(data)),
                "anywhere": (0, len(buffer)),
            }[region]
            stop = min(stop, len(buffer))
            if stop <= start:
                continue
            position = start + where % (stop - start)
            buffer[position] ^= xor
            sample = layout.sample_at(position)
            if sample is not None:
                touched.add(sample)
        elif op[0] == "truncate":
            del buffer[op[1] % max(len(buffer), 1) :]
        elif op[0] == "extend":
            buffer += op[1]
        elif op[0] in ("offset", "count") and len(buffer) < layout.header_end:
            continue  # truncated: there is no table left to edit
        elif op[0] == "offset":
            _, k, how, value = op
            k %= layout.count + 1
            old = layout.offsets[k]
            new = {
                "huge": 2**32 - 1,
                "zero": 0,
                "size": len(data),
                "size+1": len(data) + 1,
                "+1": old + 1,
                "-1": old - 1,
                "header": layout.header_end,
                "random": value,
            }[how] % 2**32
            struct.pack_into("<I", buffer, 4 + 4 * k, new)
        elif op[0] == "count":
            value = op[1]
            new = (layout.count + value if value in (-1, 1) else value) % 2**32
            struct.pack_into("<I", buffer, 0, new)
    end = layout.header_end  # the count and offsets, and the file size they imply
    header_changed = len(buffer) != len(data) or buffer[:end] != data[:end]
    # A flipped sample may read differently only where its offsets still bound it.
    intact = [k for k in touched if buffer[4 + 4 * k : 12 + 4 * k] == data[4 + 4 * k : 12 + 4 * k]]
    return bytes(buffer), header_changed, set(intact)


@FUZZ
@given(
    shard=st.integers(0, 100),
    ops=SHARD_OPS,
    sync_size=st.booleans(),
    options=st.fixed_dictionaries(
        {}, optional={"zero_copy": st.booleans(), "pread": st.booleans()}
    ),
)
def test_shard_byte_mutations(templates, shard, ops, sync_size, options):
    template = templates["plain"]
    shard %= len(template.files)
    with fresh(template) as path:
        file = path / template.files[shard]
        data, header_changed, touched = apply_shard_ops(file.read_bytes(), ops)
        file.write_bytes(data)
        if sync_size:  # make the index agree on the size, so the checks behind it are reached
            index = json.loads((path / "index.json").read_text())
            index["shards"][shard]["raw_data"]["bytes"] = len(data)
            (path / "index.json").write_text(json.dumps(index))
        mutation = f"shard {shard} ops {ops} (index size synced: {sync_size})"
        result = attempt(path, mutation, **options)
    # A changed count, offset table or file size is always detected.
    assert raised(result) or not header_changed, f"{mutation}: the corrupt header went unnoticed"
    if isinstance(result, ShardstreamError):
        return
    # What did read is exact, except for the samples whose own bytes were flipped.
    got = normalized(result)
    assert len(got) == SAMPLES, mutation
    start = template.starts[shard]
    for k, (actual, expected) in enumerate(zip(got, EXPECTED, strict=True)):
        if actual is not None and k - start not in touched:
            assert actual == expected, f"{mutation}: sample {k} changed silently"


# Payloads for the variable-size columns: random bytes and ones crafted to stress decoders.
PAYLOADS = st.one_of(
    st.binary(max_size=24),
    st.sampled_from(
        [
            b"",
            b"[" * 50000,
            b'{"a":' * 30000,
            b"9" * 5000,
            b"-" + b"9" * 4299,
            b"\xff\xfe",
            b"\xed\xa0\x80",  # an encoded surrogate
            b"1e99999",
            b"NaN",
            b'"\\ud800"',
            b"\x08",  # ndarray: a dtype code and no shape
            b"\x22\x03",  # ndarray float32, ndim 0 with 8-byte shape width
            b"\x08\xfc" + b"\xff" * 63,  # ndim 63, uint8 widths
            b"\x08\xff" + b"\xff" * 8 * 63,  # ndim 63, uint64 widths
            b"\x08\x04\x00",  # one dimension of length 0
            b"\x08\x07" + b"\xff" * 8,  # one dimension of 2**64 - 1
            b"\x08\x08" + b"\x02\x02" + b"abc",  # shape 2x2, 3 values
            b"\x42\x04\x01" + b"\x00" * 7,  # float64, 1 value, 7 bytes
            b"\x63\x04\x01x",  # unknown dtype code
            b"\x08\x80" + b"\x01" * 32 + b"z",  # ndim 32
            b"\x08\x84" + b"\x01" * 33 + b"z",  # ndim 33
        ]
    ),
)


# Well-formed payloads too, so that most samples get past some columns and fail (or not) at one.
PLAIN_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=6,
)
VALID_ARRAYS = st.builds(
    lambda dtype, shape: get_encoding("ndarray").encode(np.ones(shape, dtype)),
    st.sampled_from(["uint8", "int16", "float32", "float64", "uint64"]),
    st.lists(st.integers(1, 3), min_size=1, max_size=4).map(tuple),
)
VALID_PAYLOADS = {
    "a": VALID_ARRAYS,
    "b": st.binary(max_size=16),
    "j": PLAIN_JSON.map(lambda value: json.dumps(value).encode()),
    "n": st.integers().map(lambda value: str(value).encode()),
    "s": st.text(max_size=8).map(lambda value: value.encode("utf-8", "surrogatepass")),
}


@FUZZ
@given(
    samples=st.lists(
        st.fixed_dictionaries(
            {
                name: VALID_PAYLOADS[name] | PAYLOADS
                for name, spec in COLUMNS.items()
                if size_of(spec) is None
            }
            | {
                name: st.binary(min_size=size, max_size=size)
                for name, spec in COLUMNS.items()
                if (size := size_of(spec)) is not None
            }
        ),
        min_size=1,
        max_size=3,
    ),
    options=st.fixed_dictionaries(
        {}, optional={"zero_copy": st.booleans(), "pread": st.booleans()}
    ),
)
def test_crafted_sample_payloads(templates, samples, options):
    """A shard that is consistent with its index but holds arbitrary column payloads."""
    template = templates["plain"]
    schema = MDSSchema(COLUMNS, sort=False)
    parts = []
    for sample in samples:
        sizes = [
            len(sample[name])
            for name, size in zip(schema.names, schema.sizes, strict=True)
            if size is None
        ]
        parts.append(
            struct.pack(f"<{len(sizes)}I", *sizes) + b"".join(sample[n] for n in schema.names)
        )
    config = schema.config_bytes(compression=None, hashes=[], size_limit=None)
    data = shard_header(config, [len(p) for p in parts]) + b"".join(parts)
    with fresh(template) as path:
        index = json.loads((path / "index.json").read_text())
        entry = index["shards"][0]
        entry["samples"] = len(samples)
        entry["raw_data"]["bytes"] = len(data)
        (path / entry["raw_data"]["basename"]).write_bytes(data)
        (path / "index.json").write_text(json.dumps(index))
        result = attempt(path, f"shard 0 holding crafted payloads {samples!r:.2000}", **options)
    if isinstance(result, ShardstreamError):
        return
    for sample, got in zip(samples, result, strict=False):  # the raw columns read back exactly
        if isinstance(got, ShardstreamError):
            continue
        assert bytes(got["b"]) == sample["b"]
        assert got["i"] == int.from_bytes(sample["i"], "little", signed=True)


# --- split shards (json, csv) -------------------------------------------------------------------

LINES = st.one_of(
    st.binary(max_size=16),
    st.text(max_size=12).map(lambda text: text.encode("utf-8", "surrogatepass") + b"\n"),
    st.sampled_from(
        [
            b"",
            b"\n",
            b"[" * 50000,
            b'{"a":' * 30000,
            b'{"id": ' + b"9" * 5000 + b"}",
            b"9" * 5000 + b",1,x\n",
            b"1," + b"9" * 400 + b",x\n",
            b"1,nan,x\n",
            b"1,2\n",
            b"1,2,3,4\n",
            b"\xff\xfe\n",
            b"[1, 2]\n",
            b'{"id": 1}\n',
        ]
    ),
)


@FUZZ
@given(
    shard=st.sampled_from([0, 1]),
    target=st.sampled_from(["raw_data", "raw_meta"]),
    ops=INDEX_BYTE_OPS,
    sync_size=st.booleans(),
)
def test_split_shard_byte_mutations(templates, shard, target, ops, sync_size):
    template = templates["split"]
    with fresh(template) as path:
        index = json.loads((path / "index.json").read_text())
        info = index["shards"][shard][target]
        file = path / info["basename"]
        data = apply_byte_ops(file.read_bytes(), ops)
        file.write_bytes(data)
        if sync_size:
            info["bytes"] = len(data)
            (path / "index.json").write_text(json.dumps(index))
        attempt(path, f"split shard {shard} {target} ops {ops} (size synced {sync_size})")


@FUZZ
@given(
    fmt=st.sampled_from(["json", "csv"]),
    lines=st.lists(LINES, min_size=1, max_size=4),
)
def test_split_shard_crafted_lines(templates, fmt, lines):
    template = templates["split"]
    number = ["json", "csv"].index(fmt)
    data, meta = _split_files(lines)
    with fresh(template) as path:
        index = json.loads((path / "index.json").read_text())
        entry = _split_entry(fmt, number, data, meta, len(lines))
        index["shards"][number] = entry
        (path / entry["raw_data"]["basename"]).write_bytes(data)
        (path / entry["raw_meta"]["basename"]).write_bytes(meta)
        (path / "index.json").write_text(json.dumps(index))
        attempt(path, f"{fmt} shard holding lines {lines!r:.2000}")


# --- compressed shards ----------------------------------------------------------------------------

ZSTD_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("flip"), st.integers(0, 1 << 20), st.integers(1, 255)),
        st.tuples(st.just("truncate"), st.integers(0, 1 << 20)),
        st.tuples(st.just("insert"), st.integers(0, 1 << 20), st.binary(min_size=1, max_size=16)),
    ),
    min_size=1,
    max_size=3,
)


@FUZZ
@given(
    shard=st.integers(0, 100),
    ops=ZSTD_OPS,
    sync_size=st.booleans(),
    options=read_options(),
)
def test_zstd_file_mutations(templates, shard, ops, sync_size, options):
    template = templates["zstd"]
    shard %= len(template.files)
    with fresh(template) as path:
        file = path / template.files[shard]
        data = apply_byte_ops(file.read_bytes(), ops)
        file.write_bytes(data)
        if sync_size:
            index = json.loads((path / "index.json").read_text())
            index["shards"][shard]["zip_data"]["bytes"] = len(data)
            (path / "index.json").write_text(json.dumps(index))
        result = attempt(path, f"zstd shard {shard} ops {ops} (size synced {sync_size})", **options)
    for error in raised(result):
        assert isinstance(error, (ShardFormatError, ChecksumError)), repr(error)


def _zstd_frame(content_size: int, blocks: list[bytes]) -> bytes:
    """A zstd frame whose header claims ``content_size`` bytes (8-byte field, no checksum)."""
    descriptor = 0b1100_0000  # Frame_Content_Size_flag 3: an 8-byte size; not single-segment
    window = bytes([(17 - 10) << 3])  # a 128 KiB window
    header = b"\x28\xb5\x2f\xfd" + bytes([descriptor]) + window + struct.pack("<Q", content_size)
    return header + b"".join(blocks)


def _rle_block(byte: int, size: int, *, last: bool) -> bytes:
    header = int(last) | (1 << 1) | (size << 3)  # Block_Type 1: RLE
    return header.to_bytes(3, "little") + bytes([byte])


def _replace_zstd_shard(path: Path, template: Template, frame: bytes) -> None:
    index = json.loads((path / "index.json").read_text())
    index["shards"][0]["zip_data"]["bytes"] = len(frame)
    (path / template.files[0]).write_bytes(frame)
    (path / "index.json").write_text(json.dumps(index))


def _peak_while(read: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        result = read()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("claimed", [2**40, 2**64 - 1])
def test_zstd_frame_claiming_a_huge_content_size(templates, claimed):
    template = templates["zstd"]
    frame = _zstd_frame(claimed, [_rle_block(0, 1000, last=True)])
    with fresh(template) as path:
        _replace_zstd_shard(path, template, frame)
        result, peak = _peak_while(lambda: attempt(path, f"zstd frame claiming {claimed} bytes"))
    errors = raised(result)
    assert len(errors) == template.index["shards"][0]["samples"], result
    assert all(isinstance(e, ShardFormatError) for e in errors), errors
    assert peak < 16 << 20, peak


def test_zstd_bomb_is_cut_off_at_the_size_index_json_promises(templates):
    template = templates["zstd"]
    block = 1 << 17  # 128 KiB per 4-byte RLE block: 256 MiB in 8 KiB of file
    count = (256 << 20) // block
    blocks = [_rle_block(0, block, last=i == count - 1) for i in range(count)]
    frame = _zstd_frame(count * block, blocks)
    with fresh(template) as path:
        _replace_zstd_shard(path, template, frame)
        result, peak = _peak_while(lambda: attempt(path, "a 256 MiB zstd bomb"))
    errors = raised(result)
    assert len(errors) == template.index["shards"][0]["samples"], result
    assert all(isinstance(e, ShardFormatError) for e in errors), errors
    assert "decompresses to more than the" in str(errors[0])
    assert peak < 32 << 20, peak
