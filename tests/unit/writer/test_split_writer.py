"""JSONWriter, XSVWriter, CSVWriter and TSVWriter: what mosaicml-streaming's writers promise.

The first group restates, in our words, the reference suite's tests of these writers (size
limit, config, a large dataset read back in order, exist_ok); then the file layout, shard
cutting, bad arguments and bad values, and uploads.
"""

from __future__ import annotations

import inspect
import json
import os
import struct
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shardstream import (
    CSVWriter,
    JSONWriter,
    LocalDataset,
    MDSWriter,
    StreamingDataset,
    TSVWriter,
    XSVWriter,
)
from shardstream.errors import (
    ConfigurationError,
    DatasetExistsError,
    MissingColumnError,
    SampleTypeError,
    SampleValueError,
    UnencodableTextError,
    UnknownColumnError,
    UploadError,
)
from shardstream.storage import LocalStore
from shardstream.writer import mds_writer, upload

COLUMNS = {"id": "int", "name": "str", "score": "float"}
FORMATS = {"json": JSONWriter, "xsv": XSVWriter, "csv": CSVWriter, "tsv": TSVWriter}
DELIMITED = ["xsv", "csv", "tsv"]
SEPARATORS = {"xsv": "|", "csv": ",", "tsv": "\t"}


def make(fmt: str, out: Any, columns: dict[str, str] | None = None, **kwargs: Any) -> Any:
    """A writer of format ``fmt``; an xsv one gets ``separator="|"`` unless given one."""
    if fmt == "xsv":
        kwargs.setdefault("separator", "|")
    return FORMATS[fmt](out=out, columns=columns or COLUMNS, **kwargs)


def sample(i: int) -> dict[str, Any]:
    return {"id": i, "name": f"name-{i}" + "x" * (i % 7), "score": i / 8}


def write(fmt: str, out: Any, n: int, **kwargs: Any) -> Any:
    with make(fmt, out, **kwargs) as writer:
        for i in range(n):
            writer.write(sample(i))
    return writer


def write_then(fmt: str, out: str, samples: list[dict[str, Any]], **kwargs: Any) -> None:
    """Write ``samples`` inside ``with``, then fail there (unless a write failed first)."""
    with make(fmt, out, **kwargs) as writer:
        for row in samples:
            writer.write(row)
        raise RuntimeError("stop")


def read_back(folder: Path) -> list[dict[str, Any]]:
    dataset = LocalDataset(folder, cache_dir=str(folder.parent / f"{folder.name}-cache"))
    samples = [dataset[i] for i in range(len(dataset))]
    dataset.close()
    return samples


def index(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "index.json").read_text())  # type: ignore[no-any-return]


# --- the reference suite's expectations --------------------------------------------------------


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("size_limit", [2**32, "4gb"])
def test_a_size_limit_of_4_gib_or_more_is_refused(tmp_path: Path, fmt: str, size_limit: Any):
    # Offsets are uint32 in the .meta file.
    with pytest.raises(ValueError, match=r"must\s+be under 4 GiB") as caught:
        make(fmt, tmp_path, size_limit=size_limit)
    assert isinstance(caught.value, ConfigurationError)


def test_json_config(tmp_path: Path):
    writer = JSONWriter(out=str(tmp_path), columns=COLUMNS, size_limit=32)
    assert writer.get_config() == {
        "version": 2,
        "format": "json",
        "compression": None,
        "hashes": [],
        "size_limit": 32,
        "columns": COLUMNS,
        "newline": "\n",
    }
    assert not os.listdir(tmp_path)  # the constructor touches nothing


@pytest.mark.parametrize("fmt", DELIMITED)
def test_delimited_config(tmp_path: Path, fmt: str):
    columns = {"zeta": "str", "alpha": "int", "mid": "float"}
    config = make(fmt, str(tmp_path), columns, size_limit=32).get_config()
    expected = {
        "version": 2,
        "format": fmt,
        "compression": None,
        "hashes": [],
        "size_limit": 32,
        "column_names": ["alpha", "mid", "zeta"],  # sorted, as the reference stores them
        "column_encodings": ["int", "float", "str"],
        "newline": "\n",
    }
    if fmt == "xsv":
        expected["separator"] = "|"  # csv and tsv imply theirs
    assert config == expected


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_many_samples_compressed_and_hashed_read_back_in_order(tmp_path: Path, fmt: str):
    out = tmp_path / "out"
    rng = np.random.default_rng(1234)
    samples = [
        {"id": int(n), "name": f"number {n} says " + "ab" * int(n % 9), "score": float(n) / 3}
        for n in rng.integers(-(2**40), 2**40, 3000)
    ]
    with make(fmt, str(out), compression="zstd:7", hashes=["sha1", "xxh3_64"],
              size_limit=16_384) as writer:  # fmt: skip
        for row in samples:
            writer.write(row)
    assert len(index(out)["shards"]) > 5
    dataset = StreamingDataset(local=str(out), shuffle=False, batch_size=1)
    assert len(dataset) == len(samples)
    assert [dataset[i] for i in range(len(samples))] == samples
    assert list(dataset) == samples


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_exist_ok(tmp_path: Path, fmt: str):
    out = tmp_path / "out"
    write(fmt, str(out), 300, size_limit=1024)
    before = len(os.listdir(out))
    write(fmt, str(out), 1, size_limit=1024, exist_ok=True)
    # index.json, one shard and its .meta file: what the first write left is gone.
    assert sorted(os.listdir(out)) == [
        "index.json",
        f"shard.00000.{fmt}",
        f"shard.00000.{fmt}.meta",
    ]
    assert before > 3
    with pytest.raises(FileExistsError, match="is not empty; pass exist_ok=True") as caught:
        write(fmt, str(out), 1, size_limit=1024)
    assert isinstance(caught.value, DatasetExistsError)
    assert read_back(out) == [sample(0)]


# --- layout ------------------------------------------------------------------------------------


def test_json_shard_bytes(tmp_path: Path):
    with JSONWriter(out=str(tmp_path), columns={"b": "str", "a": "int"}) as writer:
        writer.write({"b": 'é"', "a": 1})
        writer.write({"a": -2, "b": ""})
    lines = [b'{"a": 1, "b": "\\u00e9\\""}\n', b'{"a": -2, "b": ""}\n']
    assert (tmp_path / "shard.00000.json").read_bytes() == b"".join(lines)
    meta = (tmp_path / "shard.00000.json.meta").read_bytes()
    first = len(lines[0])
    assert meta[:16] == struct.pack("<4I", 2, 0, first, first + len(lines[1]))
    config = json.loads(meta[16:])
    assert config == JSONWriter(out="x", columns={"b": "str", "a": "int"}).get_config()
    assert meta[16:] == json.dumps(config, sort_keys=True).encode()
    entry = index(tmp_path)["shards"][0]
    assert set(entry) == {
        "columns", "compression", "format", "hashes", "newline", "raw_data", "raw_meta",
        "samples", "size_limit", "version", "zip_data", "zip_meta",
    }  # fmt: skip
    assert entry["raw_meta"] == {"basename": "shard.00000.json.meta", "bytes": len(meta),
                                 "hashes": {}}  # fmt: skip


@pytest.mark.parametrize("fmt", DELIMITED)
def test_delimited_shard_bytes(tmp_path: Path, fmt: str):
    sep = SEPARATORS[fmt]
    with make(fmt, str(tmp_path), {"name": "str", "id": "int", "score": "float"},
              newline="\r\n") as writer:  # fmt: skip
        writer.write({"score": 0.1, "name": "a b", "id": 10**30})
        writer.write({"score": float("inf"), "name": "", "id": -1})
    header = f"id{sep}name{sep}score\r\n".encode()
    rows = [f"{10**30}{sep}a b{sep}0.1\r\n".encode(), f"-1{sep}{sep}inf\r\n".encode()]
    data = (tmp_path / f"shard.00000.{fmt}").read_bytes()
    assert data == header + b"".join(rows)
    meta = (tmp_path / f"shard.00000.{fmt}.meta").read_bytes()
    offsets = [len(header), len(header) + len(rows[0]), len(data)]
    assert meta[:16] == struct.pack("<4I", 2, *offsets)  # past the header line
    entry = index(tmp_path)["shards"][0]
    assert ("separator" in entry) == (fmt == "xsv")
    assert entry["format"] == fmt
    assert entry["newline"] == "\r\n"
    assert read_back(tmp_path)[1] == {"id": -1, "name": "", "score": float("inf")}


def test_size_limit_counts_sample_bytes_only(tmp_path: Path):
    # Each line is 6 bytes ("12345\n"); the header line and offsets do not count.
    with CSVWriter(out=str(tmp_path), columns={"n": "int"}, size_limit=18) as writer:
        for i in range(7):
            writer.write({"n": 12345 + i})
    shards = index(tmp_path)["shards"]
    assert [s["samples"] for s in shards] == [3, 3, 1]
    assert [s["raw_data"]["bytes"] for s in shards] == [2 + 18, 2 + 18, 2 + 6]


def test_a_sample_over_the_limit_gets_a_shard_of_its_own_and_none_is_empty(tmp_path: Path):
    with JSONWriter(out=str(tmp_path), columns={"t": "str"}, size_limit=50) as writer:
        for text in ["short", "x" * 200, "short", "y" * 300]:
            writer.write({"t": text})
    assert [s["samples"] for s in index(tmp_path)["shards"]] == [1, 1, 1, 1]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_compressed_files_are_the_data_and_meta_compressed(tmp_path: Path, fmt: str):
    write(fmt, str(tmp_path / "zip"), 40, compression="gz", size_limit=400, hashes=["md5"])
    write(fmt, str(tmp_path / "raw"), 40, size_limit=400, hashes=["md5"])
    import gzip

    zipped, raw = index(tmp_path / "zip")["shards"], index(tmp_path / "raw")["shards"]
    assert len(zipped) == len(raw) > 1
    for z, r in zip(zipped, raw, strict=True):
        assert z["raw_data"] == r["raw_data"]
        for part in ("data", "meta"):
            name = z[f"zip_{part}"]["basename"]
            assert name == z[f"raw_{part}"]["basename"] + ".gz"
            unzipped = gzip.decompress((tmp_path / "zip" / name).read_bytes())
            assert len(unzipped) == z[f"raw_{part}"]["bytes"]
            expected = (tmp_path / "raw" / r[f"raw_{part}"]["basename"]).read_bytes()
            if part == "meta":  # its config names the compression
                expected = expected.replace(b'"compression": null', b'"compression": "gz"')
            assert unzipped == expected
    assert read_back(tmp_path / "zip") == [sample(i) for i in range(40)]


def test_the_writers_are_the_reference_family_and_not_mds_writers(tmp_path: Path):
    assert issubclass(CSVWriter, XSVWriter)
    assert issubclass(TSVWriter, XSVWriter)
    for cls in FORMATS.values():
        assert not issubclass(cls, MDSWriter)
        assert not hasattr(cls, "write_columns")
    assert not issubclass(JSONWriter, XSVWriter)


# --- bad arguments -----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("encoding", ["bytes", "int64", "ndarray", "json", "pkl", "nope"])
def test_encodings_other_than_str_int_float_are_refused(tmp_path: Path, fmt: str, encoding: str):
    with pytest.raises(
        ConfigurationError, match=f"column 'x' has encoding '{encoding}'.*MDSWriter"
    ):
        make(fmt, tmp_path, {"id": "int", "x": encoding})


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("columns", [{}, None, [("id", "int")]])
def test_columns_must_be_a_non_empty_dict(tmp_path: Path, fmt: str, columns: Any):
    with pytest.raises(ConfigurationError, match="columns must be a non-empty dict"):
        FORMATS[fmt](
            out=str(tmp_path), columns=columns, **({"separator": "|"} if fmt == "xsv" else {})
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"separator": ""}, "needs a non-empty str"),
        ({"separator": None}, "needs a non-empty str"),
        ({"newline": ""}, "need a non-empty newline"),
        ({"newline": 10}, "newline must be a str"),
    ],
)
def test_bad_separator_or_newline(tmp_path: Path, kwargs: dict[str, Any], message: str):
    with pytest.raises(ConfigurationError, match=message):
        make("xsv", tmp_path, **kwargs)


@pytest.mark.parametrize("newline", ["x", ";\n", "\u2028"])
def test_a_json_newline_must_be_json_whitespace(tmp_path: Path, newline: str):
    with pytest.raises(ConfigurationError, match="spaces, tabs"):
        JSONWriter(out=str(tmp_path), columns=COLUMNS, newline=newline)


def test_json_whitespace_newlines_read_back(tmp_path: Path):
    for number, newline in enumerate(["", " ", "\r\n", "\t\n"]):
        write("json", str(tmp_path / str(number)), 5, newline=newline)
        assert read_back(tmp_path / str(number)) == [sample(i) for i in range(5)]


@pytest.mark.parametrize("fmt", DELIMITED)
def test_a_column_name_holding_a_delimiter_is_refused(tmp_path: Path, fmt: str):
    if fmt == "xsv":
        with pytest.raises(ConfigurationError, match=r"column name 'a\.b' holds the separator"):
            make(fmt, tmp_path, {"a.b": "int"}, separator=".")
    sep = SEPARATORS[fmt]
    with pytest.raises(ConfigurationError, match="holds the separator"):
        make(fmt, tmp_path, {f"a{sep}b": "int"})
    with pytest.raises(ConfigurationError, match="holds the newline"):
        make(fmt, tmp_path, {"a\nb": "int"})


# --- bad values --------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize(
    ("column", "value", "expects"),
    [
        ("id", "1", "int"),
        ("id", 1.0, "int"),
        ("id", True, "int"),  # it would read back as True (json) or not at all (text)
        ("id", np.int64(1), "int"),
        ("score", 1, "float"),
        ("score", "0.5", "float"),
        ("name", b"bytes", "str"),
        ("name", None, "str"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused(
    tmp_path: Path, fmt: str, column: str, value: Any, expects: str
):
    out = tmp_path / "out"
    with pytest.raises(AttributeError, match=rf"sample 1 .*column '{column}'.*expects {expects}"):
        write_then(fmt, str(out), [sample(0), {**sample(1), column: value}])
    assert not (out / "index.json").exists()
    with pytest.raises(SampleTypeError):
        make(fmt, str(tmp_path / "again")).write({**sample(0), column: value})


@pytest.mark.parametrize("fmt", DELIMITED)
@pytest.mark.parametrize("role", ["separator", "newline"])
def test_a_text_value_holding_a_delimiter_is_refused(tmp_path: Path, fmt: str, role: str):
    bad = f"a{SEPARATORS[fmt] if role == 'separator' else chr(10)}b"
    writer = make(fmt, str(tmp_path))
    with pytest.raises(ValueError, match=rf"sample 0 .*column 'name'.*holds the {role}") as caught:
        writer.write({**sample(0), "name": bad})
    assert isinstance(caught.value, SampleValueError)


def test_a_multi_character_separator_that_would_split_elsewhere_is_refused(tmp_path: Path):
    writer = XSVWriter(out=str(tmp_path), columns={"a": "str", "b": "str"}, separator="aa")
    writer.write({"a": "x", "b": "y"})
    with pytest.raises(SampleValueError, match="would split differently"):
        writer.write({"a": "xa", "b": "y"})  # "xa" + "aa" + "y" splits as "x", "ay"


def test_a_lone_surrogate(tmp_path: Path):
    bad = {**sample(0), "name": "half \ud800"}
    with pytest.raises(UnicodeError, match=r"column 'name'.*lone surrogate") as caught:
        CSVWriter(out=str(tmp_path / "csv"), columns=COLUMNS).write(bad)
    assert isinstance(caught.value, UnencodableTextError)
    # JSON escapes it (as the reference does), and it reads back as it was.
    write_one = JSONWriter(out=str(tmp_path / "json"), columns=COLUMNS)
    with write_one as writer:
        writer.write(bad)
    assert read_back(tmp_path / "json") == [bad]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_missing_and_extra_keys(tmp_path: Path, fmt: str):
    writer = make(fmt, str(tmp_path / "a"))
    with pytest.raises(KeyError, match=r"sample 0 .*has no column 'score'") as caught:
        writer.write({"id": 1, "name": "x"})
    assert isinstance(caught.value, MissingColumnError)
    with pytest.raises(UnknownColumnError, match=r"\['extra'\].*extra_keys='drop'"):
        writer.write({**sample(0), "extra": 1})
    with make(fmt, str(tmp_path / "b"), extra_keys="drop") as dropping:
        dropping.write({**sample(0), "extra": 1})
    assert read_back(tmp_path / "b") == [sample(0)]


def test_write_after_finish_names_the_writer(tmp_path: Path):
    writer = write("tsv", str(tmp_path), 2)
    with pytest.raises(ConfigurationError, match="this TSVWriter is finished"):
        writer.write(sample(3))
    writer.finish()  # a second finish does nothing
    assert read_back(tmp_path) == [sample(0), sample(1)]


def test_an_error_inside_with_publishes_no_index(tmp_path: Path):
    with pytest.raises(RuntimeError, match="stop"):
        write_then("json", str(tmp_path), [sample(i) for i in range(20)], size_limit=100)
    assert not (tmp_path / "index.json").exists()
    assert (tmp_path / "shard.00000.json.meta").exists()  # finished shards stay, unindexed


# --- uploads -----------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upload, "backoff_delays", lambda retries, rng, **kwargs: [0.0] * retries)


class RecordingStore(LocalStore):
    """Records what the remote held when ``index.json`` was uploaded; can fail one key."""

    def __init__(self, root: str, fail_key: str | None = None) -> None:
        super().__init__(root)
        self.fail_key = fail_key
        self.seen_at_index: list[str] | None = None
        self._lock = threading.Lock()

    def put_file(self, local_path: str, key: str) -> None:
        with self._lock:
            if self.fail_key and key.endswith(self.fail_key):  # names carry a write token
                raise TimeoutError(f"injected failure for {key}")
            if key == "index.json":
                self.seen_at_index = sorted(os.listdir(self.root))
        super().put_file(local_path, key)


@pytest.fixture
def use_store(monkeypatch: pytest.MonkeyPatch) -> Any:
    def use(store: RecordingStore) -> RecordingStore:
        monkeypatch.setattr(mds_writer, "open_store", lambda url, **_: store)
        return store

    return use


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_data_and_meta_files_are_uploaded_before_the_index(
    tmp_path: Path, use_store: Any, fmt: str
):
    remote = tmp_path / "remote"
    store = use_store(RecordingStore(str(remote)))
    write(fmt, (str(tmp_path / "local"), str(remote)), 40, size_limit=300, compression="zstd")
    shards = index(remote)["shards"]
    files = sorted(s[key]["basename"] for s in shards for key in ("zip_data", "zip_meta"))
    assert len(shards) > 2
    assert store.seen_at_index == files
    assert not (tmp_path / "local").exists()
    assert read_back(remote) == [sample(i) for i in range(40)]


def test_a_failed_meta_upload_publishes_no_index(tmp_path: Path, use_store: Any):
    remote = tmp_path / "remote"
    use_store(RecordingStore(str(remote), fail_key=".00001.csv.meta"))
    with pytest.raises(UploadError, match=r"shard\.[0-9a-f]{12}\.00001\.csv\.meta"):
        write("csv", (str(tmp_path / "local"), str(remote)), 40, size_limit=300, retry=0)
    assert not (remote / "index.json").exists()


# The reference's parameters and defaults (its constructors, then the **kwargs it accepts);
# REQUIRED marks those without a default.
REQUIRED = inspect.Parameter.empty
REFERENCE_PARAMETERS = {
    "columns": REQUIRED, "newline": "\n", "out": REQUIRED, "keep_local": False,
    "compression": None, "hashes": None, "size_limit": 1 << 26, "progress_bar": False,
    "max_workers": None, "retry": 2, "exist_ok": False,
}  # fmt: skip


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_the_reference_parameters_and_defaults(fmt: str):
    params = inspect.signature(FORMATS[fmt]).parameters
    expected = {**REFERENCE_PARAMETERS, **({"separator": REQUIRED} if fmt == "xsv" else {})}
    for name, default in expected.items():
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert params[name].default == default, name
    assert ("separator" in params) == (fmt == "xsv")
