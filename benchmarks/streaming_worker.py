"""One run of the streaming benchmark (started by ``streaming_bench.py``, once per measurement).

Run with the Python of the venv that holds the library under test::

    .venv/bin/python benchmarks/streaming_worker.py write --lib shardstream --out DIR ...
    .venv-ref/bin/python benchmarks/streaming_worker.py epoch --lib streaming --data DIR ...
    .venv-ref/bin/python benchmarks/streaming_worker.py epoch --lib litdata --data DIR ...
    .venv/bin/python benchmarks/streaming_worker.py ttfb --lib shardstream --data DIR ...

Modes:

``write``
    Writes the samples: an MDS dataset with shardstream's ``MDSWriter`` (``--lib shardstream``;
    mosaicml-streaming reads the very same files), or litdata's own format with
    ``litdata.optimize`` (``--lib litdata``). Not timed for the comparison.
``epoch``
    A full epoch (shuffled unless ``--no-shuffle``) through the library's
    ``StreamingDataLoader``, ``1 + --epochs`` times
    on one dataset object: the first epoch fills the cache (reported, not compared), the others
    are timed with a warm cache. Every batch is checked as it arrives.
``ttfb``
    Time from constructing the dataset to the first batch out of ``iter(loader)``, on an empty
    (cold) or a filled (warm) cache; ``--finish`` then reads and checks the rest of the epoch.
``resume``
    Reads half an epoch and saves the loader's ``state_dict`` (``--state FILE``); then, in a
    new process with ``--resume``, times ``load_state_dict`` to the first batch and checks the
    rest of the epoch against the first half's labels.

Every sample is ``{"data": bytes, "label": int}``; sample ``i``'s data starts with ``i`` as 8
little-endian bytes, its length and last 8 bytes follow from ``(seed, i)``, so each sample is
checked against its label without keeping the data. The result is one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import platform
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

_import_started = time.perf_counter()
import numpy as np  # noqa: E402 - the import is timed

POOL_BYTES = 1 << 20
MIN_SIZE = 16


class Payloads:
    """The samples of a workload: ``payload(i)`` is a pure function of ``(seed, i)``."""

    def __init__(self, samples: int, size: int, jitter: int, seed: int, tokens: int = 0) -> None:
        if tokens:  # token arrays: 2 bytes a token, all of one length
            size, jitter = 2 * tokens, 0
        if size - jitter < MIN_SIZE:
            raise SystemExit(f"payloads must be at least {MIN_SIZE} bytes")
        rng = np.random.default_rng(seed)
        self.tokens = tokens
        self.samples = samples
        self.pool = rng.bytes(POOL_BYTES + size + jitter)
        if jitter:
            self.lengths = rng.integers(size - jitter, size + jitter + 1, samples).tolist()
        else:
            self.lengths = [size] * samples
        self.offsets = rng.integers(0, POOL_BYTES, samples).tolist()

    def payload(self, index: int) -> bytes:
        """Sample ``index``'s data: ``index`` as 8 bytes, then bytes from the pool."""
        offset, length = self.offsets[index], self.lengths[index]
        return index.to_bytes(8, "little") + self.pool[offset : offset + length - 8]

    @property
    def column(self) -> str:
        """The payload's column: ``data`` (bytes) or ``tokens`` (a uint16 array)."""
        return "tokens" if self.tokens else "data"

    @property
    def columns(self) -> dict[str, str]:
        """The MDS columns of the samples."""
        if self.tokens:
            return {"tokens": f"ndarray:uint16:{self.tokens}", "label": "int"}
        return {"data": "bytes", "label": "int"}

    def sample(self, index: int) -> dict[str, Any]:
        """Sample ``index`` as the writers take it (tokens: the payload's bytes as uint16)."""
        if self.tokens:
            return {"tokens": np.frombuffer(self.payload(index), "<u2"), "label": index}
        return {"data": self.payload(index), "label": index}

    def tail(self, index: int) -> bytes:
        """The last 8 bytes of sample ``index``'s data."""
        end = self.offsets[index] + self.lengths[index] - 8
        return self.pool[end - 8 : end]


class Checker:
    """Checks each batch as it arrives and, per epoch, that every label came exactly once."""

    def __init__(self, payloads: Payloads, padding: int = 0) -> None:
        self.samples = payloads.samples
        self.padding = padding
        self.length_array = np.asarray(payloads.lengths, np.int64)
        tails = b"".join(payloads.tail(i) for i in range(payloads.samples))
        self.tail_rows = np.frombuffer(tails, np.uint8).reshape(-1, 8)  # sample i's last 8 bytes
        self.tokens = payloads.tokens
        self.failures = 0
        self.labels: list[Any] = []

    def batch(self, batch: Any) -> int:
        """Check one collated batch (``data``: a list, ``label``: a tensor); its length.

        Token batches (``tokens``: a tensor of shape (batch, tokens)) are checked as arrays.
        """
        labels = np.asarray(batch["label"]).astype(np.int64, copy=False)
        if self.tokens:
            return self._token_batch(batch["tokens"], labels)
        data = batch["data"]
        if len(data) != len(labels) or labels.min() < 0 or labels.max() >= self.samples:
            self.failures += len(labels)
            return len(labels)
        # A batch at a time, so that the check costs every library little and alike (a loop
        # over samples that looks up per-sample lists cost ~0.7 us a sample at 1M samples):
        # each value's length, its first 8 bytes (its label) and its last 8. Only those 16
        # bytes of a value are copied (joining whole values would copy every ~100 KiB sample).
        sizes = np.fromiter(map(len, data), np.int64, count=len(data))
        good = (sizes == self.length_array[labels]) & (sizes >= 8)
        if good.all():
            heads = np.frombuffer(b"".join([value[:8] for value in data]), "<i8")
            tails = np.frombuffer(b"".join([value[-8:] for value in data]), np.uint8)
            good &= heads == labels
            good &= (tails.reshape(-1, 8) == self.tail_rows[labels]).all(axis=1)
        self.failures += int(len(labels) - good.sum())
        self.labels.append(labels)
        return len(labels)

    def _token_batch(self, tokens: Any, labels: np.ndarray[Any, Any]) -> int:
        rows = np.asarray(tokens)
        if (
            rows.dtype != np.uint16
            or rows.shape != (len(labels), self.tokens)
            or labels.min() < 0
            or labels.max() >= self.samples
        ):
            self.failures += len(labels)
            return len(labels)
        octets = np.ascontiguousarray(rows).astype("<u2", copy=False).view(np.uint8)
        heads = octets[:, :8].copy().view("<u8")[:, 0]
        good = (heads == labels) & (octets[:, -8:] == self.tail_rows[labels]).all(axis=1)
        self.failures += int(len(labels) - good.sum())
        self.labels.append(labels)
        return len(labels)

    def end_epoch(self) -> dict[str, Any]:
        """Every label once, plus the padding the library documents: what came, what did not."""
        seen = np.concatenate(self.labels) if self.labels else np.empty(0, np.int64)
        counts = np.bincount(seen, minlength=self.samples)
        result = {
            "samples_seen": int(seen.size),
            "padding_expected": self.padding,
            "missing_labels": int((counts == 0).sum()),
            "repeated_labels": int((counts > 1).sum()),
            "most_repeats": int(counts.max(initial=0)),
            "sample_failures": self.failures,
        }
        # Padding longer than the epoch (fewer samples than a batch) repeats samples again.
        result["passed"] = (
            result["missing_labels"] == 0
            and seen.size == self.samples + self.padding
            and result["repeated_labels"] == min(self.padding, self.samples)
            and result["most_repeats"] <= 1 + -(-self.padding // max(self.samples, 1))
            and self.failures == 0
        )
        self.labels, self.failures = [], 0
        return result


# --- memory: peak RSS of this process and of its DataLoader workers --------------------------


def _status(pid: int) -> dict[str, int]:
    """VmHWM, VmRSS, RssAnon, RssFile of ``pid`` in KiB (empty once it has exited)."""
    values = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                    values[key] = int(rest.split()[0])
    except (OSError, ValueError):
        return {}
    return values


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


class MemoryMonitor:
    """Polls ``/proc`` every ``interval`` s: the peaks of this process and of its workers.

    The workers are the children that run this very command line (forked DataLoader workers);
    other children (multiprocessing's resource tracker) are left out. VmHWM is the kernel's
    high-water mark of each process's resident set; it is read until the process exits, so the
    last reading is its peak up to the last ``interval``. A forked worker's resident set
    includes the pages it shares with the main process (torch, the libraries), as ``ps`` shows.
    """

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.me = os.getpid()
        self.my_cmdline = _cmdline(self.me)
        self.peaks: dict[int, dict[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> MemoryMonitor:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        # A run shorter than one interval still gets a reading of this process.
        self.sample()

    def _children(self) -> list[int]:
        pids: list[int] = []
        try:
            for task in os.listdir(f"/proc/{self.me}/task"):
                with open(f"/proc/{self.me}/task/{task}/children", encoding="ascii") as handle:
                    pids.extend(int(pid) for pid in handle.read().split())
        except OSError:
            pass
        return [pid for pid in pids if _cmdline(pid) == self.my_cmdline]

    def sample(self) -> None:
        """Read this process and its workers now (the poller may miss a short-lived worker)."""
        for pid in [self.me, *self._children()]:
            values = _status(pid)
            if not values:
                continue
            peak = self.peaks.setdefault(pid, {})
            for key in ("VmHWM", "RssAnon", "RssFile"):
                peak[key] = max(peak.get(key, 0), values.get(key, 0))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def workers(self) -> list[dict[str, float]]:
        """Each worker's peak: ``vmhwm_mib`` and the largest anonymous and file-backed RSS."""
        return [_mib(peak) for pid, peak in sorted(self.peaks.items()) if pid != self.me]

    def main(self) -> dict[str, float]:
        """The same for this process, over the monitored time."""
        return _mib(self.peaks.get(self.me, {}))


def _mib(peak: dict[str, int]) -> dict[str, float]:
    return {
        "vmhwm_mib": peak.get("VmHWM", 0) / 1024,
        "rss_anon_mib": peak.get("RssAnon", 0) / 1024,
        "rss_file_mib": peak.get("RssFile", 0) / 1024,
    }


def main_memory() -> dict[str, float]:
    values = _status(os.getpid())
    return {
        "vmhwm_mib": values.get("VmHWM", 0) / 1024,
        "rss_anon_mib_now": values.get("RssAnon", 0) / 1024,
        "rss_file_mib_now": values.get("RssFile", 0) / 1024,
    }


# --- the libraries -----------------------------------------------------------------------------


def collate_bytes(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """What torch's default collation gives for ``bytes`` data, for data that is not ``bytes``.

    litdata returns ``bytes`` columns as memoryviews, which torch's default collation turns
    into one tensor per byte position and which cannot pass between processes; this makes
    the same batch the other libraries get by default: a list of ``bytes`` and a label tensor.
    """
    import torch

    return {
        "data": [bytes(sample["data"]) for sample in samples],
        "label": torch.tensor([int(sample["label"]) for sample in samples], dtype=torch.int64),
    }


def collate_tokens(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Token arrays stacked into one tensor, as torch's default collation does for arrays."""
    import torch

    return {
        "tokens": torch.from_numpy(np.stack([np.asarray(s["tokens"]) for s in samples])),
        "label": torch.tensor([int(sample["label"]) for sample in samples], dtype=torch.int64),
    }


def version_of(lib: str) -> str:
    """The library's version; imports it whole, so that no timed region pays for an import.

    ``import streaming`` and ``import litdata`` load their datasets and loaders at once;
    shardstream loads ``StreamingDataset`` and ``StreamingDataLoader`` on first access (to
    keep ``import shardstream`` light), so they are loaded here, outside the timings.
    """
    module = importlib.import_module("shardstream" if lib == "shardstream" else lib)
    if lib == "shardstream":
        _ = module.StreamingDataset, module.StreamingDataLoader
    return str(module.__version__)


def padding_of(lib: str, samples: int, batch_size: int) -> int:
    """Repeated samples the library documents for one epoch on one rank: none.

    shardstream and mosaicml-streaming repeat samples only to give several ranks as many
    (``EpochPlan.padding``), and litdata (``drop_last=False``) yields each sample once: on a
    single rank each yields every sample once, its last batch short.
    """
    del lib, samples, batch_size  # the same for every library and size
    return 0


def make_loader(
    lib: str,
    data: str,
    cache: str,
    batch_size: int,
    num_workers: int,
    shuffle: bool = True,
    tokens: bool = False,
) -> tuple[Any, Any]:
    """``(dataset, loader)``: the library's StreamingDataset and StreamingDataLoader.

    Every library collates with torch's default, except litdata's ``bytes`` (see
    :func:`collate_bytes`) and, for the same batch shape, its token arrays.
    """
    if lib == "shardstream":
        from shardstream import StreamingDataLoader, StreamingDataset

        dataset = StreamingDataset(remote=data, local=cache, batch_size=batch_size, shuffle=shuffle)
        loader = StreamingDataLoader(dataset, batch_size=batch_size, num_workers=num_workers)
        return dataset, loader
    if lib == "streaming":
        streaming = importlib.import_module("streaming")
        dataset = streaming.StreamingDataset(
            remote=data, local=cache, batch_size=batch_size, shuffle=shuffle
        )
        loader = streaming.StreamingDataLoader(
            dataset, batch_size=batch_size, num_workers=num_workers
        )
        return dataset, loader
    if lib == "litdata":
        litdata = importlib.import_module("litdata")
        # A remote dataset is cached where the caller says (an empty folder: a cold start).
        remote = "://" in data and cache is not None
        if os.environ.get("AWS_ENDPOINT_URL", "").startswith("http://"):
            _allow_plain_http(importlib.import_module("litdata.streaming.downloader"))
        dataset = litdata.StreamingDataset(
            data, cache_dir=cache if remote else None, shuffle=shuffle
        )
        loader = litdata.StreamingDataLoader(
            dataset,
            batch_size=batch_size,
            num_workers=num_workers,
            collate_fn=collate_tokens if tokens else collate_bytes,
        )
        return dataset, loader
    raise SystemExit(f"unknown --lib {lib!r}")


def _allow_plain_http(downloader: Any) -> None:
    """Let litdata's obstore path reach an ``http://`` endpoint (the loopback link).

    litdata fetches chunks through obstore with fixed client options that refuse plain HTTP
    (``BadScheme``); real S3 is HTTPS. The option is added, not the path bypassed, so litdata
    reads the link as it reads S3.
    """
    options = getattr(downloader, "_OBSTORE_CLIENT_OPTIONS", None)
    if isinstance(options, dict):
        downloader._OBSTORE_CLIENT_OPTIONS = {**options, "allow_http": "true"}


def clean_reference_shm(lib: str) -> None:
    """mosaicml-streaming keeps state in /dev/shm; drop blocks left by earlier runs."""
    if lib == "streaming":
        util = importlib.import_module("streaming.base.util")
        util.clean_stale_shared_memory()


# --- the modes ---------------------------------------------------------------------------------


def write(args: argparse.Namespace, payloads: Payloads) -> dict[str, Any]:
    started = time.perf_counter()
    if args.lib == "shardstream":
        from shardstream import MDSWriter

        with MDSWriter(
            out=args.out,
            columns=payloads.columns,
            compression=None,
            hashes=None,
            size_limit=args.size_limit,
        ) as writer:
            for index in range(payloads.samples):
                writer.write(payloads.sample(index))
    elif args.lib == "litdata":
        litdata = importlib.import_module("litdata")
        litdata.optimize(
            fn=payloads.sample,
            inputs=list(range(payloads.samples)),
            output_dir=args.out,
            num_workers=min(2, os.cpu_count() or 1),
            chunk_bytes=None if args.chunk_items else args.size_limit,
            chunk_size=args.chunk_items or None,
            mode="overwrite",
        )
    else:
        raise SystemExit("write: --lib must be shardstream or litdata")
    seconds = time.perf_counter() - started
    files = [os.path.join(parent, name) for parent, _, names in os.walk(args.out) for name in names]
    return {
        "write_seconds": seconds,
        "files": len(files),
        "bytes": sum(os.path.getsize(path) for path in files),
    }


def run_epoch(loader: Any, checker: Checker) -> dict[str, Any]:
    """One epoch through ``loader``: wall and CPU seconds, checks, the workers' peak RSS."""
    gc.collect()
    with MemoryMonitor() as monitor:
        cpu_started = time.process_time()
        started = time.perf_counter()
        batches = 0
        for batch in loader:
            if not batches:  # every worker is up by the first batch, however short the epoch
                monitor.sample()
            checker.batch(batch)
            batches += 1
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
    checks = checker.end_epoch()
    return {
        "seconds": seconds,
        "main_cpu_seconds": cpu,
        "batches": batches,
        "samples_per_s": checks["samples_seen"] / seconds,
        "checks": checks,
        "workers_memory": monitor.workers(),
        "main_memory": monitor.main(),
    }


def epoch(args: argparse.Namespace, payloads: Payloads) -> dict[str, Any]:
    clean_reference_shm(args.lib)
    checker = Checker(payloads, padding_of(args.lib, args.samples, args.batch_size))
    gc.collect()
    gc.freeze()
    dataset, loader = make_loader(
        args.lib, args.data, args.cache, args.batch_size, args.workers, not args.no_shuffle,
        tokens=bool(args.tokens),
    )  # fmt: skip
    runs = [run_epoch(loader, checker) for _ in range(1 + args.epochs)]
    first, timed = runs[0], runs[1:] or runs[:1]  # --epochs 0: the first (cold) epoch alone
    times = [run["seconds"] for run in timed]
    rates = [run["samples_per_s"] for run in timed]
    workers = [w["vmhwm_mib"] for run in runs for w in run["workers_memory"]]
    anon = [w["rss_anon_mib"] for run in runs for w in run["workers_memory"]]
    del loader, dataset
    return {
        "first_epoch": first,
        "epochs": timed,
        "epoch_seconds": {"all": times, "best": min(times), "median": statistics.median(times)},
        "samples_per_s": {"best": max(rates), "median": statistics.median(rates)},
        "checks_passed": all(run["checks"]["passed"] for run in runs),
        "memory": {
            "main": main_memory(),
            "main_rss_anon_mib_max": max(run["main_memory"]["rss_anon_mib"] for run in runs),
            "main_rss_file_mib_max": max(run["main_memory"]["rss_file_mib"] for run in runs),
            "worker_vmhwm_mib_max": max(workers) if workers else None,
            "worker_rss_anon_mib_max": max(anon) if anon else None,
            "workers_per_epoch": args.workers,
        },
    }


def ttfb(args: argparse.Namespace, payloads: Payloads) -> dict[str, Any]:
    clean_reference_shm(args.lib)
    padding = padding_of(args.lib, args.samples, args.batch_size)
    checker = Checker(payloads, padding) if args.finish else None
    gc.collect()
    started = time.perf_counter()
    cpu_started = time.process_time()
    dataset, loader = make_loader(
        args.lib, args.data, args.cache, args.batch_size, args.workers, tokens=bool(args.tokens)
    )
    constructed = time.perf_counter()
    iterator = iter(loader)
    batch = next(iterator)
    first = time.perf_counter()
    result: dict[str, Any] = {
        "construct_seconds": constructed - started,
        "ttfb_seconds": first - started,
        # This process's CPU (every thread; not its DataLoader workers'): steadier than the
        # wall time on a loaded machine.
        "ttfb_cpu_seconds": time.process_time() - cpu_started,
        "first_batch_size": len(batch["label"]),
    }
    if checker is not None:
        checker.batch(batch)
        for batch in iterator:
            checker.batch(batch)
        result["epoch_seconds"] = time.perf_counter() - started
        result["checks"] = checker.end_epoch()
        result["checks_passed"] = result["checks"]["passed"]
    else:  # only the first batch is read: check what came
        probe = Checker(payloads)
        probe.batch(batch)
        result["checks_passed"] = probe.failures == 0 and len(batch["label"]) > 0
    result["memory"] = {"main": main_memory()}
    del iterator, loader, dataset
    return result


def resume(args: argparse.Namespace, payloads: Payloads) -> dict[str, Any]:
    """Without ``--resume``: read half an epoch, save the loader's state and the labels seen.

    With ``--resume``: from constructing the dataset and ``load_state_dict`` to the first batch
    after the saved point (``resume_seconds``); then the rest of the epoch, checked together
    with the first half's labels: every sample exactly once over the two processes.
    """
    clean_reference_shm(args.lib)
    gc.collect()
    if not args.resume:
        dataset, loader = make_loader(
            args.lib, args.data, args.cache, args.batch_size, args.workers, tokens=bool(args.tokens)
        )
        checker = Checker(payloads)
        seen = 0
        for batch in loader:
            seen += checker.batch(batch)
            if seen >= args.samples // 2:
                break
        state = loader.state_dict()
        labels = np.concatenate(checker.labels).tolist()
        saved = {"state": state, "labels": labels, "failures": checker.failures}
        with open(args.state, "w", encoding="utf-8") as handle:
            json.dump(saved, handle)
        return {"samples_before": seen, "state": state, "checks_passed": checker.failures == 0}
    with open(args.state, encoding="utf-8") as handle:
        saved = json.load(handle)
    checker = Checker(payloads, padding_of(args.lib, args.samples, args.batch_size))
    checker.labels = [np.asarray(saved["labels"], dtype=np.int64)]
    checker.failures = saved["failures"]
    started = time.perf_counter()
    cpu_started = time.process_time()
    dataset, loader = make_loader(
        args.lib, args.data, args.cache, args.batch_size, args.workers, tokens=bool(args.tokens)
    )
    loader.load_state_dict(saved["state"])
    constructed = time.perf_counter()
    iterator = iter(loader)
    checker.batch(next(iterator))
    first = time.perf_counter()
    cpu = time.process_time() - cpu_started  # this process's threads, not its workers'
    for batch in iterator:
        checker.batch(batch)
    rest = time.perf_counter() - first
    checks = checker.end_epoch()
    del iterator, loader, dataset
    return {
        "resume_seconds": first - started,
        "resume_cpu_seconds": cpu,
        "construct_seconds": constructed - started,
        "rest_seconds": rest,
        "samples_before": len(saved["labels"]),
        "checks": checks,
        "checks_passed": checks["passed"],
        "memory": {"main": main_memory()},
    }


def parse(argv: Iterable[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["write", "epoch", "ttfb", "resume"])
    parser.add_argument("--lib", required=True, choices=["shardstream", "streaming", "litdata"])
    parser.add_argument("--samples", type=int, required=True)
    parser.add_argument("--size", type=int, required=True, help="payload bytes per sample")
    parser.add_argument("--jitter", type=int, default=0, help="payload size varies by +- this")
    parser.add_argument("--tokens", type=int, default=0, help="samples of this many uint16 tokens")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write: the folder to write")
    parser.add_argument("--size-limit", type=int, default=1 << 26, help="write: shard bytes")
    parser.add_argument("--chunk-items", type=int, default=0, help="write (litdata): items a chunk")
    parser.add_argument("--data", help="epoch/ttfb: the dataset (the 'remote' for MDS)")
    parser.add_argument("--cache", help="epoch/ttfb: the local cache folder")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
    parser.add_argument(
        "--epochs", type=int, default=2, help="epoch: timed warm epochs (0: the first alone)"
    )
    parser.add_argument("--no-shuffle", action="store_true", help="epoch: shuffle=False")
    parser.add_argument("--finish", action="store_true", help="ttfb: read and check the epoch")
    parser.add_argument("--state", help="resume: the file of the saved state and labels")
    parser.add_argument("--resume", action="store_true", help="resume: from --state")
    parser.add_argument("--result", required=True, help="where the JSON result goes")
    return parser.parse_args(None if argv is None else list(argv))


def main() -> None:
    args = parse()
    import_started = time.perf_counter()
    version = version_of(args.lib)
    if args.mode != "write":
        importlib.import_module("torch")
    import_seconds = time.perf_counter() - import_started
    payloads = Payloads(args.samples, args.size, args.jitter, args.seed, args.tokens)
    modes: dict[str, Callable[[argparse.Namespace, Payloads], dict[str, Any]]] = {
        "write": write,
        "epoch": epoch,
        "ttfb": ttfb,
        "resume": resume,
    }
    result = modes[args.mode](args, payloads)
    result.update(
        lib=args.lib,
        mode=args.mode,
        version=version,
        python=sys.version.split()[0],
        numpy=np.__version__,
        platform=platform.platform(),
        import_seconds=import_seconds,
        numpy_import_seconds=import_started - _import_started,
        params={k: v for k, v in vars(args).items() if k not in ("result", "mode")},
    )
    with open(args.result, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    sys.stdout.flush()
    if (args.mode == "ttfb" and not args.finish) or (args.mode == "resume" and not args.resume):
        # An iterator left after its first batch (or half-way): stop its DataLoader workers
        # (which would go on fetching shards for a few seconds); do not wait for its threads.
        for pid in MemoryMonitor()._children():
            os.kill(pid, signal.SIGKILL)
        os._exit(0)


if __name__ == "__main__":
    main()
