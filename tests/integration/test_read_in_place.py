"""A dataset read in place is never written to: its files, their times and its folders stay.

Reading compressed shards decompresses them into a cache folder of the dataset's own under
``SHARDSTREAM_CACHE_DIR``, and takes its locks there; uncompressed shards need no writable
folder at all. Checked by snapshots of the data folder, by an unprivileged reader of a folder
without write permission, and on a read-only bind mount.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.parquet_data import ROWS, write_parquet
from tests.streaming_data import write_dataset

from shardstream.cache.layout import IN_PLACE_FOLDER
from shardstream.format.compression import get_compression
from shardstream.format.hashing import hash_bytes

from .read_in_place_child import NOBODY, read_everything

CHILD = Path(__file__).with_name("read_in_place_child.py")
SAMPLES = 120


def write_split(root: Path, *, compression: str | None = "zstd") -> Path:
    """Three shards, json, csv and json, compressed, with xxh64 digests: ids 0 .. 11."""
    root.mkdir(parents=True)
    shards = []
    for number, fmt in enumerate(["json", "csv", "json"]):
        first = 4 * number
        if fmt == "json":
            lines = [json.dumps({"id": i, "text": f"t{i}"}) + "\n" for i in range(first, first + 4)]
        else:
            lines = [f"{i},t{i}\n" for i in range(first, first + 4)]
        data = "".join(lines).encode()
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line.encode()))
        meta = struct.pack(f"<{len(offsets) + 1}I", len(lines), *offsets) + b"{}"
        name = f"shard.{number:05d}.{fmt}"
        entry: dict[str, Any] = {
            "compression": compression,
            "format": fmt,
            "hashes": ["xxh64"],
            "newline": "\n",
            "samples": len(lines),
            "size_limit": None,
            "version": 2,
        }
        for key, basename, body in (("data", name, data), ("meta", f"{name}.meta", meta)):
            entry[f"raw_{key}"] = _file(root, basename, body, write=compression is None)
            entry[f"zip_{key}"] = None
            if compression is not None:
                packed = get_compression(compression).compress(body)
                entry[f"zip_{key}"] = _file(root, f"{basename}.{compression}", packed)
        if fmt == "json":
            entry["columns"] = {"id": "int", "text": "str"}
        else:
            entry["column_names"] = ["id", "text"]
            entry["column_encodings"] = ["int", "str"]
        shards.append(entry)
    (root / "index.json").write_text(json.dumps({"shards": shards, "version": 2}))
    return root


def _file(root: Path, basename: str, body: bytes, *, write: bool = True) -> dict[str, Any]:
    if write:
        (root / basename).write_bytes(body)
    digests = {"xxh64": hash_bytes("xxh64", body)}
    return {"basename": basename, "bytes": len(body), "hashes": digests}


# name: (writer, sample count, parquet?)
DATASETS: dict[str, tuple[Callable[[Path], Any], int, bool]] = {
    "mds": (lambda root: write_dataset(root, SAMPLES), SAMPLES, False),
    "mds-zstd": (lambda root: write_dataset(root, SAMPLES, compression="zstd"), SAMPLES, False),
    "json-csv-zstd": (write_split, 12, False),
    "parquet": (write_parquet, ROWS, True),
}


def snapshot(root: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every entry below ``root`` (and ``root``): mode, size, modification time, content hash."""
    found = {}
    for folder, folders, names in os.walk(root):
        for name in [".", *folders, *names] if folder == str(root) else [*folders, *names]:
            path = os.path.join(folder, name)
            status = os.lstat(path)
            digest = ""
            if stat.S_ISREG(status.st_mode):
                digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            found[os.path.relpath(path, root)] = (
                status.st_mode, status.st_size, status.st_mtime_ns, digest
            )  # fmt: skip
    return found


def check_samples(read: dict[str, list[int]], samples: int) -> None:
    assert read, "nothing was read"
    for way, ids in read.items():
        assert set(ids) == set(range(samples)), way  # a loader pads the last batch, if short
        assert len(ids) - samples < 8, way


@pytest.fixture
def user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "user-cache"
    monkeypatch.setenv("SHARDSTREAM_CACHE_DIR", str(root))
    return root


@pytest.mark.parametrize("kind", list(DATASETS))
def test_reading_in_place_leaves_the_folder_as_it_was(
    tmp_path: Path, user_cache: Path, kind: str
) -> None:
    write, samples, parquet = DATASETS[kind]
    data = tmp_path / kind
    write(data)
    before = snapshot(data)
    check_samples(read_everything(str(data), parquet=parquet), samples)
    assert snapshot(data) == before
    copies = [
        name
        for folder, _, names in os.walk(user_cache / IN_PLACE_FOLDER)
        for name in names
        if not name.endswith(".lock")
    ]
    if kind.endswith("zstd"):  # decompressed once, into the dataset's own cache folder
        assert len(os.listdir(user_cache / IN_PLACE_FOLDER)) == 1  # every reader found it
        assert copies
        assert not [name for name in copies if name.endswith(".zstd")]
    else:  # nothing to decompress: no cache folder, no lock
        assert not (user_cache / IN_PLACE_FOLDER).exists()


@pytest.fixture
def locked_down() -> Iterator[Path]:
    """A folder under the system's temporary folder that the user ``nobody`` can reach."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the reader drops to the user nobody")
    top = Path(tempfile.mkdtemp(prefix="shardstream-read-only-"))
    try:
        top.chmod(0o755)
        yield top
    finally:
        for folder, _, _ in os.walk(top):
            os.chmod(folder, 0o755)  # noqa: S103 - read-only folders cannot be emptied
        shutil.rmtree(top)


def _read_only(root: Path) -> None:
    for folder, _, names in os.walk(root):
        for name in names:
            os.chmod(os.path.join(folder, name), 0o444)
    for folder, _, _ in sorted(os.walk(root), reverse=True):  # the deepest first
        os.chmod(folder, 0o555)  # noqa: S103 - readable by the user nobody, writable by none


def test_an_unprivileged_reader_reads_a_folder_it_cannot_write(locked_down: Path) -> None:
    data, warmup = locked_down / "data", locked_down / "warmup"
    write_dataset(data, SAMPLES, compression="zstd")
    write_split(data / "split")
    shutil.copytree(data, warmup)
    _read_only(data)
    cache = locked_down / "cache"
    cache.mkdir(mode=0o700)
    os.chown(cache, NOBODY, NOBODY)
    before = snapshot(data)
    path = os.pathsep.join(sys.path)
    environ = {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}
    outcomes = []
    for folder in (data, data / "split"):
        child = subprocess.run(
            [sys.executable, str(CHILD), str(folder), str(warmup / folder.relative_to(data)),
             str(cache)],
            env=environ, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert child.returncode == 0, child.stderr[-3000:]
        outcomes.append(json.loads(child.stdout.strip().splitlines()[-1]))
    for outcome, samples in zip(outcomes, (SAMPLES, 12), strict=True):
        assert outcome["uid"] == NOBODY
        assert outcome["data_writable"] is False  # the test means what it says
        assert "error" not in outcome, outcome["error"]
        check_samples(outcome["read"], samples)
    assert snapshot(data) == before


@contextlib.contextmanager
def read_only_bind(source: Path, target: Path) -> Iterator[None]:
    """``source`` mounted read-only at ``target``."""
    target.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(source), str(target)], check=False)
    if mounted.returncode != 0:
        pytest.skip("mount --bind is not permitted here")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(target)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(target)], check=True)


def test_a_read_only_mount_reads_fine(tmp_path: Path, user_cache: Path) -> None:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting needs root and mount(8)")
    data = tmp_path / "data"
    write_dataset(data, SAMPLES, compression="zstd")
    write_split(data / "split")
    with read_only_bind(data, tmp_path / "mounted"):
        with pytest.raises(OSError, match="Read-only file system"):
            (tmp_path / "mounted" / "probe").write_bytes(b"")
        check_samples(read_everything(str(tmp_path / "mounted")), SAMPLES)
        check_samples(read_everything(str(tmp_path / "mounted" / "split")), 12)
