from __future__ import annotations

import itertools
import json
import os
import re
import struct
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.spec import MDS_KEYS
from tests.writer_samples import COLUMNS, check_dataset, sample

from shardstream import Encoding, LocalDataset, MDSWriter, register_encoding
from shardstream.errors import (
    ConfigurationError,
    DatasetExistsError,
    MissingColumnError,
    SampleEncodingError,
    UnknownEncodingError,
    UnsupportedURLError,
    UploadError,
)
from shardstream.format.compression import get_compression
from shardstream.format.hashing import hash_bytes
from shardstream.storage import LocalStore
from shardstream.writer import mds_writer, upload


def write(out: Any, n: int = 10, columns: dict[str, str] | None = None, **kwargs: Any) -> MDSWriter:
    with MDSWriter(out=out, columns=columns or COLUMNS, **kwargs) as writer:
        for i in range(n):
            writer.write(sample(i))
    return writer


def fill(writer: MDSWriter, n: int) -> None:
    for i in range(n):
        writer.write(sample(i))
    writer.finish()


def fail_inside_with(fail: Callable[[MDSWriter], None], n: int, **kwargs: Any) -> None:
    with MDSWriter(**kwargs) as writer:
        for i in range(n):
            writer.write(sample(i))
        fail(writer)


def stop(writer: MDSWriter) -> None:
    raise RuntimeError("stop")


def read_index(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "index.json").read_text())  # type: ignore[no-any-return]


# --- the written dataset ------------------------------------------------------------------------


def test_writes_shards_and_an_index(tmp_path: Path):
    out = tmp_path / "ds"
    write(str(out), 10)
    index = read_index(out)
    assert index["version"] == 2
    (shard,) = index["shards"]
    assert set(shard) == MDS_KEYS
    assert shard["column_names"] == ["id", "text", "vec"]
    assert shard["column_encodings"] == ["int", "str", "ndarray:float32:4"]
    assert shard["column_sizes"] == [8, None, 16]
    assert shard["samples"] == 10
    assert shard["format"] == "mds"
    assert shard["compression"] is None
    assert shard["zip_data"] is None
    assert shard["hashes"] == []
    assert shard["size_limit"] == 1 << 26
    assert shard["raw_data"]["basename"] == "shard.00000.mds"
    assert shard["raw_data"]["bytes"] == (out / "shard.00000.mds").stat().st_size
    assert sorted(os.listdir(out)) == ["index.json", "shard.00000.mds"]
    check_dataset(out, 10)


def test_shard_file_layout(tmp_path: Path):
    out = tmp_path / "ds"
    write(out, 3, columns={"id": "int"}, extra_keys="drop")
    data = (out / "shard.00000.mds").read_bytes()
    count, *offsets = struct.unpack_from("<5I", data)
    assert count == 3
    assert offsets[-1] == len(data)
    assert [b - a for a, b in itertools.pairwise(offsets)] == [8, 8, 8]
    config = json.loads(data[20 : offsets[0]])
    entry = read_index(out)["shards"][0]
    assert config == {
        k: v for k, v in entry.items() if k not in ("raw_data", "zip_data", "samples")
    }
    assert [data[o : o + 8] for o in offsets[:-1]] == [struct.pack("<q", i) for i in range(3)]


def test_pathlike_and_file_url_outputs(tmp_path: Path):
    write(tmp_path / "a", 4)
    write(f"file://{tmp_path}/b", 4)
    check_dataset(tmp_path / "a", 4)
    check_dataset(tmp_path / "b", 4)


def test_nothing_is_touched_before_the_first_write(tmp_path: Path):
    out = tmp_path / "ds"
    writer = MDSWriter(out=str(out), columns=COLUMNS)
    assert not out.exists()
    writer.write(sample(0))
    assert out.is_dir()
    writer.finish()
    assert (out / "index.json").exists()


def test_finish_without_samples_writes_an_empty_index(tmp_path: Path):
    out = tmp_path / "ds"
    MDSWriter(out=out, columns=COLUMNS).finish()
    assert read_index(out) == {"shards": [], "version": 2}
    assert len(LocalDataset(out)) == 0


def test_finish_twice_and_write_after_finish(tmp_path: Path):
    writer = write(tmp_path / "ds", 2)
    before = (tmp_path / "ds" / "index.json").read_bytes()
    writer.finish()
    assert (tmp_path / "ds" / "index.json").read_bytes() == before
    with pytest.raises(ConfigurationError, match="this MDSWriter is finished"):
        writer.write(sample(3))


def test_exception_inside_with_publishes_no_index(tmp_path: Path):
    out = tmp_path / "ds"
    with pytest.raises(RuntimeError, match="stop"):
        fail_inside_with(stop, 10, out=out, columns=COLUMNS, size_limit=200)
    assert (out / "shard.00000.mds").exists()
    assert not (out / "index.json").exists()


# --- arguments ----------------------------------------------------------------------------------


@pytest.mark.parametrize("columns", [{}, None, ["id"], "int"])
def test_columns_must_be_a_non_empty_dict(tmp_path: Path, columns: Any):
    with pytest.raises(ConfigurationError, match="columns must be a non-empty dict"):
        MDSWriter(out=tmp_path, columns=columns)


def test_unknown_encoding_is_refused_at_construction(tmp_path: Path):
    with pytest.raises(UnknownEncodingError, match="unknown column encoding 'text'"):
        MDSWriter(out=tmp_path / "ds", columns={"id": "text"})
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize(
    ("compression", "message"),
    [
        ("lz4", "unknown compression 'lz4'"),
        ("zstd:99", "'zstd:99': the level"),
        ("snappy:2", "takes no level"),
    ],
)
def test_bad_compression(tmp_path: Path, compression: str, message: str):
    with pytest.raises(ConfigurationError, match=message):
        MDSWriter(out=tmp_path, columns=COLUMNS, compression=compression)


@pytest.mark.parametrize(
    ("hashes", "message"),
    [
        (["sha1", "md5"], "unique and sorted"),
        (["md5", "md5"], "unique and sorted"),
        (["sha9"], "unknown hash algorithm 'sha9'"),
    ],
)
def test_bad_hashes(tmp_path: Path, hashes: list[str], message: str):
    with pytest.raises(ConfigurationError, match=message):
        MDSWriter(out=tmp_path, columns=COLUMNS, hashes=hashes)


@pytest.mark.parametrize("size_limit", [2**32, 2**40, "4gb", "5gb"])
def test_size_limit_of_4_gib_or_more_is_refused(tmp_path: Path, size_limit: int | str):
    with pytest.raises(
        ConfigurationError, match=rf"size_limit={size_limit!r} is \d+ bytes; .*32-bit"
    ):
        MDSWriter(out=tmp_path, columns=COLUMNS, size_limit=size_limit)


@pytest.mark.parametrize(
    ("size_limit", "expected"),
    [("64mb", 64 * 2**20), ("1kb", 1024), (2**32 - 1, 2**32 - 1), (None, None), (0, None)],
)
def test_size_limit_is_recorded(tmp_path: Path, size_limit: Any, expected: int | None):
    write(tmp_path / "ds", 2, size_limit=size_limit)
    assert read_index(tmp_path / "ds")["shards"][0]["size_limit"] == expected


@pytest.mark.parametrize("size_limit", [-1, "lots", "1.5 parsecs"])
def test_bad_size_limit(tmp_path: Path, size_limit: Any):
    with pytest.raises(ConfigurationError, match="size_limit"):
        MDSWriter(out=tmp_path, columns=COLUMNS, size_limit=size_limit)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"retry": -1}, "retry must be a non-negative integer"),
        ({"retry": 1.5}, "retry must be"),
        ({"max_workers": 0}, "max_workers must be a positive integer"),
    ],
)
def test_bad_retry_and_workers(tmp_path: Path, kwargs: dict[str, Any], message: str):
    with pytest.raises(ConfigurationError, match=message):
        MDSWriter(out=tmp_path, columns=COLUMNS, **kwargs)


@pytest.mark.parametrize("out", [3, None, ("a",), ("a", "b", "c")])
def test_bad_out(out: Any):
    with pytest.raises(ConfigurationError, match="out must be a path, a URL or a"):
        MDSWriter(out=out, columns=COLUMNS)


def test_remote_as_the_local_half_of_out_is_refused(tmp_path: Path):
    with pytest.raises(ConfigurationError, match="must be a local folder"):
        MDSWriter(out=("s3://bucket/ds", str(tmp_path)), columns=COLUMNS)


# --- samples ------------------------------------------------------------------------------------


def test_missing_column(tmp_path: Path):
    with MDSWriter(out=tmp_path / "ds", columns=COLUMNS) as writer:
        with pytest.raises(MissingColumnError, match="sample has no column 'vec'") as info:
            writer.write({"id": 1, "text": "a"})
        assert isinstance(info.value, KeyError)
        writer.write(sample(0))
    check_dataset(tmp_path / "ds", 1)


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("text", b"bytes", "column 'text': encoding 'str' expects str"),
        ("id", b"\x00" * 8, "column 'id': encoding 'int' expects int"),
        ("id", 2**70, "column 'id': .*out of range"),
        ("vec", np.zeros(3, np.float32), r"column 'vec': .*expects shape \(4,\)"),
    ],
)
def test_bad_values_name_the_column(tmp_path: Path, column: str, value: Any, message: str):
    with (
        MDSWriter(out=tmp_path / "ds", columns=COLUMNS) as writer,
        pytest.raises(SampleEncodingError, match=message),
    ):
        writer.write({**sample(1), column: value})


def test_numpy_integers_are_valid_ints(tmp_path: Path):
    with MDSWriter(out=tmp_path / "ds", columns={"a": "int", "b": "uint8"}) as writer:
        writer.write({"a": np.int64(-7), "b": np.uint8(255)})
        writer.write({"a": np.uint32(7), "b": np.int16(3)})
    ds = LocalDataset(tmp_path / "ds")
    assert [(s["a"], int(s["b"])) for s in ds] == [(-7, 255), (7, 3)]


def test_out_of_range_for_uint8(tmp_path: Path):
    with (
        MDSWriter(out=tmp_path / "ds", columns={"b": "uint8"}) as writer,
        pytest.raises(
            SampleEncodingError,
            match=r"column 'b': encoding 'uint8' holds 0\.\.255; 256 is out of range",
        ),
    ):
        writer.write({"b": 256})


class Reversed(Encoding):
    """A custom encoding: text stored reversed."""

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, str):
            raise self.reject(value, "str")
        return value[::-1].encode()

    def decode(self, data: Any) -> str:
        return bytes(data).decode()[::-1]


@pytest.mark.usefixtures("isolated_registry")
def test_custom_encoding_through_writer_and_reader(tmp_path: Path):
    register_encoding("reversed", lambda name, arg: Reversed(name))
    with MDSWriter(out=tmp_path / "ds", columns={"r": "reversed", "id": "int"}) as writer:
        for i in range(3):
            writer.write({"r": f"abc{i}", "id": i})
    assert read_index(tmp_path / "ds")["shards"][0]["column_encodings"] == ["int", "reversed"]
    data = (tmp_path / "ds" / "shard.00000.mds").read_bytes()
    assert b"2cba" in data
    assert [s["r"] for s in LocalDataset(tmp_path / "ds")] == ["abc0", "abc1", "abc2"]


# --- shards, compression and hashes ---------------------------------------------------------


def test_size_limit_splits_into_numbered_shards(tmp_path: Path):
    out = tmp_path / "ds"
    write(out, 50, size_limit=600)
    shards = read_index(out)["shards"]
    assert len(shards) > 3
    assert [s["raw_data"]["basename"] for s in shards] == [
        f"shard.{k:05}.mds" for k in range(len(shards))
    ]
    assert sum(s["samples"] for s in shards) == 50
    for shard in shards:
        size = (out / shard["raw_data"]["basename"]).stat().st_size
        assert size == shard["raw_data"]["bytes"]
        assert size <= 600 or shard["samples"] == 1
    check_dataset(out, 50)


def test_a_sample_larger_than_the_limit_gets_its_own_shard(tmp_path: Path):
    out = tmp_path / "ds"
    with MDSWriter(out=out, columns={"b": "bytes"}, size_limit=1000) as writer:
        for size in (10, 10, 5000, 10):
            writer.write({"b": b"x" * size})
    shards = read_index(out)["shards"]
    assert [s["samples"] for s in shards] == [2, 1, 1]
    assert shards[1]["raw_data"]["bytes"] > 5000
    assert [len(s["b"]) for s in LocalDataset(out)] == [10, 10, 5000, 10]


@pytest.mark.parametrize("compression", ["zstd", "zstd:7", "gz", "gz:1", "bz2:3", "br:4", "snappy"])
def test_compressed_shards(tmp_path: Path, compression: str):
    out = tmp_path / "ds"
    write(out, 30, compression=compression, size_limit=1000)
    code = compression.partition(":")[0]
    shards = read_index(out)["shards"]
    assert len(shards) > 1
    names = sorted(os.listdir(out))
    assert names == sorted(
        ["index.json"] + [f"shard.{k:05}.mds.{code}" for k in range(len(shards))]
    )
    for shard in shards:
        assert shard["compression"] == compression
        zipped = (out / shard["zip_data"]["basename"]).read_bytes()
        assert shard["zip_data"]["bytes"] == len(zipped)
        raw = get_compression(compression).decompress(zipped)
        assert shard["raw_data"]["bytes"] == len(raw)
        assert shard["raw_data"]["basename"] == shard["zip_data"]["basename"][: -len(code) - 1]
    check_dataset(out, 30)


def test_hashes_digest_raw_and_compressed_bytes(tmp_path: Path):
    out = tmp_path / "ds"
    write(out, 20, compression="zstd", hashes=["md5", "sha256", "xxh64"], size_limit=800)
    for shard in read_index(out)["shards"]:
        assert shard["hashes"] == ["md5", "sha256", "xxh64"]
        zipped = (out / shard["zip_data"]["basename"]).read_bytes()
        raw = get_compression("zstd").decompress(zipped)
        for name in shard["hashes"]:
            assert shard["zip_data"]["hashes"][name] == hash_bytes(name, zipped)
            assert shard["raw_data"]["hashes"][name] == hash_bytes(name, raw)


def test_hashes_of_uncompressed_shards(tmp_path: Path):
    out = tmp_path / "ds"
    write(out, 5, hashes=["sha1"])
    shard = read_index(out)["shards"][0]
    assert shard["raw_data"]["hashes"] == {
        "sha1": hash_bytes("sha1", (out / "shard.00000.mds").read_bytes())
    }


# --- exist_ok ---------------------------------------------------------------------------------


def test_non_empty_output_folder_is_refused(tmp_path: Path):
    out = tmp_path / "ds"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    writer = MDSWriter(out=out, columns=COLUMNS)
    with pytest.raises(
        DatasetExistsError, match=rf"output folder {out} is not empty; pass exist_ok=True"
    ) as info:
        writer.write(sample(0))
    assert isinstance(info.value, FileExistsError)
    assert (out / "precious.txt").read_text() == "keep me"
    assert os.listdir(out) == ["precious.txt"]


def test_exist_ok_replaces_the_contents(tmp_path: Path):
    out = tmp_path / "ds"
    write(out, 20, size_limit=500)
    write(out, 3, exist_ok=True)
    assert sorted(os.listdir(out)) == ["index.json", "shard.00000.mds"]
    check_dataset(out, 3)


def test_an_empty_existing_folder_is_fine(tmp_path: Path):
    out = tmp_path / "ds"
    out.mkdir()
    write(out, 2)
    check_dataset(out, 2)


# --- remote outputs ----------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upload, "backoff_delays", lambda retries, rng, **kwargs: [0.0] * retries)


@pytest.mark.parametrize("url", [False, True])
def test_local_and_remote_folder(tmp_path: Path, url: bool):
    local, remote = tmp_path / "local", tmp_path / "remote"
    write(
        (str(local), f"file://{remote}" if url else str(remote)),
        30,
        size_limit=700,
        compression="zstd",
    )
    assert not local.exists()
    shards = read_index(remote)["shards"]
    assert len(shards) > 1
    assert sorted(os.listdir(remote)) == sorted(
        ["index.json"] + [s["zip_data"]["basename"] for s in shards]
    )
    check_dataset(remote, 30)


def test_keep_local(tmp_path: Path):
    local, remote = tmp_path / "local", tmp_path / "remote"
    write((str(local), str(remote)), 12, size_limit=500, keep_local=True)
    assert sorted(os.listdir(local)) == sorted(os.listdir(remote))
    for name in os.listdir(remote):
        assert (local / name).read_bytes() == (remote / name).read_bytes()
    check_dataset(local, 12)


class RecordingStore(LocalStore):
    """A LocalStore that records what the remote held each time ``index.json`` was published.

    ``fail_key`` is the end of the keys whose uploads fail (shard names hold a write's token).
    """

    def __init__(self, root: str, failures: int | float = 0, fail_key: str | None = None) -> None:
        super().__init__(root)
        self.failures = failures
        self.fail_key = fail_key
        self.attempts: dict[str, int] = {}
        self.remote_when_index_published: list[str] | None = None
        self._lock = threading.Lock()

    def put_file(self, local_path: str, key: str) -> None:
        with self._lock:
            self.attempts[key] = self.attempts.get(key, 0) + 1
            if (self.fail_key is None or key.endswith(self.fail_key)) and self.attempts[
                key
            ] <= self.failures:
                raise TimeoutError(f"injected failure for {key}")
            if key == "index.json":
                self.remote_when_index_published = sorted(os.listdir(self.root))
        super().put_file(local_path, key)


@pytest.fixture
def use_store(monkeypatch: pytest.MonkeyPatch) -> Any:
    def use(store: RecordingStore) -> RecordingStore:
        monkeypatch.setattr(mds_writer, "open_store", lambda url, **_: store)
        return store

    return use


def test_index_is_published_after_every_shard(tmp_path: Path, use_store: Any):
    remote = tmp_path / "remote"
    store = use_store(RecordingStore(str(remote)))
    write((str(tmp_path / "local"), str(remote)), 40, size_limit=600, max_workers=4)
    shards = [s["raw_data"]["basename"] for s in read_index(remote)["shards"]]
    assert len(shards) > 3
    assert store.remote_when_index_published == shards
    assert store.attempts == dict.fromkeys([*shards, "index.json"], 1)


@pytest.mark.parametrize("failures", [1, 2])
def test_retry_2_survives_two_failures(tmp_path: Path, use_store: Any, failures: int):
    remote = tmp_path / "remote"
    store = use_store(RecordingStore(str(remote), failures=failures))
    write((str(tmp_path / "local"), str(remote)), 10, size_limit=500, retry=2)
    assert set(store.attempts.values()) == {failures + 1}
    check_dataset(remote, 10)


@pytest.mark.parametrize("fail_key", [".00001.mds", None])
def test_failed_upload_raises_and_publishes_no_index(
    tmp_path: Path, use_store: Any, fail_key: str | None
):
    remote = tmp_path / "remote"
    store = use_store(RecordingStore(str(remote), failures=float("inf"), fail_key=fail_key))
    writer = MDSWriter(
        out=(str(tmp_path / "local"), str(remote)), columns=COLUMNS, size_limit=500, retry=2
    )
    name = r"shard\.[0-9a-f]{12}" + (re.escape(fail_key) if fail_key else r"\.0000\d\.mds")
    with pytest.raises(UploadError, match=rf"{name} .*failed after 3 attempts"):
        fill(writer, 10)
    assert "index.json" not in store.attempts
    assert not (remote / "index.json").exists()
    if fail_key is not None:
        [failed] = [key for key in store.attempts if key.endswith(fail_key)]
        assert store.attempts[failed] == 3
        assert not (remote / failed).exists()


def test_failed_upload_inside_with(tmp_path: Path, use_store: Any):
    remote = tmp_path / "remote"
    use_store(RecordingStore(str(remote), failures=float("inf"), fail_key=".00000.mds"))
    with pytest.raises(UploadError, match=r"shard\.[0-9a-f]{12}\.00000\.mds"):
        write((str(tmp_path / "local"), str(remote)), 10, size_limit=500, retry=0)
    assert not (remote / "index.json").exists()


def test_exception_inside_with_publishes_no_remote_index(tmp_path: Path, use_store: Any):
    remote = tmp_path / "remote"
    store = use_store(RecordingStore(str(remote)))
    out = (str(tmp_path / "local"), str(remote))
    with pytest.raises(MissingColumnError, match="sample has no column"):
        fail_inside_with(
            lambda writer: writer.write({}), 10, out=out, columns=COLUMNS, size_limit=300
        )
    assert "index.json" not in store.attempts
    assert not (remote / "index.json").exists()
    assert not (tmp_path / "local").exists()


def test_remote_only_url_uses_a_temporary_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    remote = tmp_path / "remote"
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(mds_writer, "open_store", lambda url, **_: LocalStore(str(remote)))
    writer = MDSWriter(out="memory://bucket/ds", columns=COLUMNS)
    assert (writer.remote, writer.local) == ("memory://bucket/ds", None)
    writer.write(sample(0))
    assert writer.local is not None
    assert os.path.dirname(writer.local) == str(tmp_path)
    for i in range(1, 5):
        writer.write(sample(i))
    writer.finish()
    assert not os.path.exists(writer.local)
    check_dataset(remote, 5)


def test_unsupported_out_fails_on_first_write():
    writer = MDSWriter(out="hdfs://bucket/ds", columns=COLUMNS)
    assert writer.remote == "hdfs://bucket/ds"
    with pytest.raises(
        UnsupportedURLError, match=r"cannot publish to 'hdfs://bucket/ds'.*'hdfs://'"
    ):
        writer.write(sample(0))


def test_unsupported_out_with_a_local_folder_fails_on_first_write(tmp_path: Path):
    writer = MDSWriter(out=(str(tmp_path / "local"), "hdfs://bucket/ds"), columns=COLUMNS)
    with pytest.raises(UnsupportedURLError, match="hdfs://bucket/ds"):
        writer.write(sample(0))
    assert not (tmp_path / "local" / "index.json").exists()


def test_a_writer_that_failed_to_start_keeps_failing(tmp_path: Path):
    # Retrying after the first write failed must not bypass the check that failed.
    out = tmp_path / "ds"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    writer = MDSWriter(out=out, columns=COLUMNS)
    with pytest.raises(DatasetExistsError):
        writer.write(sample(0))
    with pytest.raises(DatasetExistsError, match="is not empty"):
        writer.write(sample(1))
    assert os.listdir(out) == ["precious.txt"]

    remote = MDSWriter(out="hdfs://bucket/ds", columns=COLUMNS)
    with pytest.raises(UnsupportedURLError):
        remote.write(sample(0))
    with pytest.raises(UnsupportedURLError, match="hdfs://bucket/ds"):
        remote.write(sample(1))


def test_uploads_use_the_writer_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    opened: dict[str, Any] = {}

    def open_store(url: str, **options: Any) -> LocalStore:
        opened[url] = options
        return LocalStore(str(tmp_path / "remote"))

    monkeypatch.setattr(mds_writer, "open_store", open_store)
    with MDSWriter(out=(str(tmp_path / "local"), "mem://b/ds"), columns=COLUMNS, timeout=7.5) as w:
        w.write(sample(0))
    assert opened == {"mem://b/ds": {"timeout": 7.5}}
    for bad in (0, -2.0, True, "60"):  # not a positive number of seconds
        with pytest.raises(ConfigurationError, match="timeout must be a positive number"):
            MDSWriter(out=str(tmp_path / "ds"), columns=COLUMNS, timeout=bad)  # type: ignore[arg-type]
