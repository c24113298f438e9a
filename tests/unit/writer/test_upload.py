from __future__ import annotations

import os
import re
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from shardstream.errors import CredentialsError, UploadError
from shardstream.writer import upload
from shardstream.writer.upload import Uploader, backoff_delays


class FlakyStore:
    """An ObjectStore test double: the first ``failures`` attempts per key fail, then it copies."""

    def __init__(self, root: Path, failures: int | float) -> None:
        self.root = root
        self.failures = failures
        self.attempts: dict[str, int] = {}
        self.published: list[str] = []
        self._lock = threading.Lock()

    def put_file(self, local_path: str, key: str) -> None:
        with self._lock:
            self.attempts[key] = self.attempts.get(key, 0) + 1
            if self.attempts[key] <= self.failures:
                raise ConnectionError(f"injected failure {self.attempts[key]} for {key}")
        target = self.root / key
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local_path, target)
        with self._lock:
            self.published.append(key)

    def url(self, key: str) -> str:
        return f"fake://bucket/{key}"


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upload, "backoff_delays", lambda retries, rng, **kwargs: [0.0] * retries)


@pytest.fixture
def local(tmp_path: Path) -> Path:
    folder = tmp_path / "local"
    folder.mkdir()
    for name in ("shard.00000.mds", "shard.00001.mds"):
        (folder / name).write_bytes(name.encode() * 3)
    return folder


def test_backoff_delays_are_capped_exponential_jitter():
    rng = np.random.default_rng(0)
    for retries in range(8):
        delays = backoff_delays(retries, rng, base=0.5, cap=4.0)
        assert len(delays) == retries
        for attempt, delay in enumerate(delays):
            assert 0 <= delay <= min(4.0, 0.5 * 2**attempt)
    assert backoff_delays(0, rng) == []


@pytest.mark.parametrize("retry", [0, 1, 2, 5])
def test_upload_succeeds_on_the_last_allowed_attempt(tmp_path: Path, local: Path, retry: int):
    store = FlakyStore(tmp_path / "remote", failures=retry)
    uploader = Uploader(store, str(local), max_workers=1, retry=retry)
    uploader.upload("shard.00000.mds")
    uploader.close()
    assert store.attempts == {"shard.00000.mds": retry + 1}
    assert (tmp_path / "remote" / "shard.00000.mds").read_bytes() == (
        local / "shard.00000.mds"
    ).read_bytes()


@pytest.mark.parametrize("retry", [0, 2])
def test_upload_gives_up_after_retry_plus_one_attempts(tmp_path: Path, local: Path, retry: int):
    store = FlakyStore(tmp_path / "remote", failures=retry + 1)
    uploader = Uploader(store, str(local), max_workers=1, retry=retry)
    message = f"shard.00001.mds to fake://bucket/shard.00001.mds failed after {retry + 1} attempts"
    with pytest.raises(UploadError, match=re.escape(message)) as info:
        uploader.upload("shard.00001.mds")
    uploader.close()
    assert store.attempts == {"shard.00001.mds": retry + 1}
    assert isinstance(info.value.__cause__, ConnectionError)
    assert not (tmp_path / "remote" / "shard.00001.mds").exists()


def test_background_uploads_and_wait(tmp_path: Path, local: Path):
    store = FlakyStore(tmp_path / "remote", failures=1)
    uploader = Uploader(store, str(local), max_workers=2, retry=1)
    uploader.submit("shard.00000.mds")
    uploader.submit("shard.00001.mds")
    uploader.wait()
    uploader.close()
    assert sorted(store.published) == ["shard.00000.mds", "shard.00001.mds"]
    assert store.attempts == {"shard.00000.mds": 2, "shard.00001.mds": 2}


def test_wait_raises_the_failure_naming_the_file(tmp_path: Path, local: Path):
    store = FlakyStore(tmp_path / "remote", failures=float("inf"))
    uploader = Uploader(store, str(local), max_workers=1, retry=1)
    uploader.submit("shard.00000.mds")
    message = "uploading shard.00000.mds to fake://bucket/shard.00000.mds failed after 2 attempts"
    with pytest.raises(UploadError, match=re.escape(message)):
        uploader.wait()
    with pytest.raises(UploadError, match=r"shard\.00000\.mds"):
        uploader.raise_if_failed()
    assert store.published == []


def test_a_missing_local_file_is_an_upload_error(tmp_path: Path, local: Path):
    uploader = Uploader(
        FlakyStore(tmp_path / "remote", failures=0), str(local), max_workers=1, retry=0
    )
    with pytest.raises(UploadError, match=r"shard\.00009\.mds"):
        uploader.upload("shard.00009.mds")
    uploader.close()
    assert not os.path.exists(tmp_path / "remote" / "shard.00009.mds")


class RefusingStore(FlakyStore):
    """Refuses every attempt with a credentials error."""

    def put_file(self, local_path: str, key: str) -> None:
        with self._lock:
            self.attempts[key] = self.attempts.get(key, 0) + 1
        raise CredentialsError(f"{self.url(key)}: access denied; set AWS_ACCESS_KEY_ID")


def test_refused_credentials_are_not_retried(tmp_path: Path, local: Path) -> None:
    store = RefusingStore(tmp_path / "remote", failures=0)
    uploader = Uploader(store, str(local), max_workers=1, retry=5)
    with pytest.raises(UploadError, match=r"after 1 attempts: .*AWS_ACCESS_KEY_ID"):
        uploader.upload("shard.00000.mds")
    assert store.attempts == {"shard.00000.mds": 1}
    uploader.close()


class CountingBar:
    """A tqdm stand-in recording what the uploader reports."""

    def __init__(self) -> None:
        self.total: int | None = 0
        self.n = 0
        self.refreshes = 0

    def update(self, n: int) -> None:
        self.n += n

    def refresh(self) -> None:
        self.refreshes += 1


def test_progress_counts_the_bytes_of_each_published_file(local: Path, tmp_path: Path) -> None:
    store = FlakyStore(tmp_path / "remote", failures=1)  # a retry must not count twice
    bar = CountingBar()
    uploader = Uploader(store, str(local), max_workers=2, retry=2, progress=bar)
    sizes = 0
    for name in ("shard.00000.mds", "shard.00001.mds"):
        uploader.submit(name)
        sizes += (local / name).stat().st_size
    uploader.wait()
    uploader.close()
    assert bar.total == sizes
    assert bar.n == sizes
    assert bar.refreshes == 2


def test_progress_does_not_count_a_failed_upload(local: Path, tmp_path: Path) -> None:
    store = FlakyStore(tmp_path / "remote", failures=float("inf"))
    bar = CountingBar()
    uploader = Uploader(store, str(local), max_workers=1, retry=1, progress=bar)
    uploader.submit("shard.00000.mds")
    with pytest.raises(UploadError, match=re.escape("shard.00000.mds")):
        uploader.wait()
    assert bar.total == (local / "shard.00000.mds").stat().st_size
    assert bar.n == 0


def test_uploads_cancelled_after_a_failure_log_no_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    folder = tmp_path / "many"
    folder.mkdir()
    release = threading.Event()

    class FirstFails(FlakyStore):
        def put_file(self, local_path: str, key: str) -> None:
            release.wait(10)  # every other upload queues behind this one
            if key == "shard.00000.mds":
                raise ConnectionError("injected failure")
            super().put_file(local_path, key)

    uploader = Uploader(FirstFails(tmp_path / "remote", 0), str(folder), max_workers=1, retry=0)
    for number in range(20):
        (folder / f"shard.{number:05}.mds").write_bytes(b"x")
        uploader.submit(f"shard.{number:05}.mds")
    release.set()
    with pytest.raises(UploadError, match=r"shard\.00000\.mds"):
        uploader.wait()
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


def test_remove_uploaded_deletes_each_file_once_published(tmp_path: Path, local: Path):
    store = FlakyStore(tmp_path / "remote", failures=1)
    uploader = Uploader(store, str(local), max_workers=2, retry=1, remove_uploaded=True)
    for name in ("shard.00000.mds", "shard.00001.mds"):
        uploader.submit(name)
    uploader.wait()
    uploader.close()
    assert sorted(store.published) == ["shard.00000.mds", "shard.00001.mds"]
    assert os.listdir(local) == []
