"""One library's half of the MDS format benchmark (run by ``format_bench.py``, once per venv).

Run with the Python of the venv that holds the library under test::

    .venv/bin/python benchmarks/format_worker.py --lib shardstream --workload small ...
    .venv-ref/bin/python benchmarks/format_worker.py --lib streaming --workload small ...

The library is imported first and timed on its own (reported, never counted in a result).
The samples are generated next from ``numpy.random.default_rng(seed)``, so both libraries see
the very same bytes, and only then does timing start. The worker writes the dataset
``--repeats`` times (each into a fresh folder, ``finish()`` included), then reads every sample
once in a fixed random order with ``ds[i]``, ``--repeats`` times, on a warm page cache,
checking every sample as it goes and a digest over everything it returned afterwards.

Only the libraries' public APIs are used: ``MDSWriter`` and ``LocalDataset``.
The result is one JSON object written to ``--result``.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib
import json
import os
import platform
import shutil
import statistics
import sys
import time
from typing import Any

_import_started = time.perf_counter()
import numpy as np  # noqa: E402 - the import is timed

COLUMNS = {"data": "bytes", "label": "int"}
#: ``--kind tokens``: each payload is read as 2,048 uint16 tokens (``--size 4096``).
TOKEN_COLUMNS = {"data": "ndarray:uint16:2048", "label": "int"}


def import_library(lib: str) -> tuple[Any, Any, Any, str]:
    """Return ``(MDSWriter, dataset_factory, zero_copy_factory or None, version)``."""
    if lib == "shardstream":
        import shardstream
        from shardstream import LocalDataset, MDSWriter

        def open_dataset(path: str) -> Any:
            return LocalDataset(path)

        def open_zero_copy(path: str) -> Any:
            return LocalDataset(path, zero_copy=True)

        return MDSWriter, open_dataset, open_zero_copy, shardstream.__version__
    if lib == "streaming":
        # Imported by name: mosaicml-streaming lives only in the reference venv.
        streaming = importlib.import_module("streaming")

        def open_reference(path: str) -> Any:
            return streaming.LocalDataset(local=path)

        return streaming.MDSWriter, open_reference, None, streaming.__version__
    raise SystemExit(f"--lib must be shardstream or streaming, not {lib!r}")


def generate(samples: int, size: int, jitter: int, seed: int) -> tuple[list[bytes], list[int]]:
    """The payloads: ``size`` +- ``jitter`` random bytes each, the same for every library."""
    rng = np.random.default_rng(seed)
    if jitter:
        lengths = rng.integers(size - jitter, size + jitter + 1, samples).tolist()
    else:
        lengths = [size] * samples
    blob = rng.bytes(sum(lengths))
    payloads = []
    position = 0
    for length in lengths:
        payloads.append(blob[position : position + length])
        position += length
    del blob
    return payloads, lengths


def digest_payloads(payloads: list[Any]) -> str:
    """sha256 over the payloads in order, each preceded by its length (so splits count)."""
    digest = hashlib.sha256()
    for payload in payloads:
        digest.update(len(payload).to_bytes(8, "little"))
        digest.update(payload)
    return digest.hexdigest()


def file_digests(folder: str) -> dict[str, str]:
    """sha256 of every file under ``folder``, by path relative to it."""
    digests = {}
    for parent, _, names in os.walk(folder):
        for name in sorted(names):
            path = os.path.join(parent, name)
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                while chunk := handle.read(1 << 24):
                    digest.update(chunk)
            digests[os.path.relpath(path, folder)] = digest.hexdigest()
    return dict(sorted(digests.items()))


def warm_page_cache(folder: str) -> int:
    """Read every file under ``folder`` once so the timed reads find them in memory."""
    total = 0
    for parent, _, names in os.walk(folder):
        for name in names:
            with open(os.path.join(parent, name), "rb") as handle:
                while chunk := handle.read(1 << 24):
                    total += len(chunk)
    return total


def summary(times: list[float]) -> dict[str, Any]:
    return {"all": times, "best": min(times), "median": statistics.median(times)}


def time_write(
    writer_class: Any, folder: str, samples: list[dict[str, Any]], columns: dict[str, str]
) -> float:
    started = time.perf_counter()
    with writer_class(
        out=folder,
        columns=columns,
        compression=None,
        hashes=None,
        size_limit=1 << 26,
        exist_ok=False,
    ) as writer:
        for sample in samples:
            writer.write(sample)
    return time.perf_counter() - started


def time_read(
    open_dataset: Any, folder: str, order: list[int], ends: list[tuple[int, Any, Any]]
) -> tuple[float, float, int]:
    """Read each sample once in ``order``; return wall and CPU seconds and failures.

    Each sample is checked as it arrives (label, length, and its first and last 16 bytes; for
    token arrays its length and first and last token) and then dropped, as a training loop
    drops it; a separate pass checks every byte.
    """
    dataset = open_dataset(folder)
    if len(dataset) != len(ends):
        raise SystemExit(f"the dataset has {len(dataset)} samples, expected {len(ends)}")
    bad = 0
    gc.collect()
    cpu_started = time.process_time()
    started = time.perf_counter()
    for index in order:
        sample = dataset[index]
        data = sample["data"]
        length, head, tail = ends[index]
        if isinstance(head, int):  # a token array: its first and last token
            if (
                sample["label"] != index
                or len(data) != length
                or data[0] != head
                or data[-1] != tail
            ):
                bad += 1
        elif (
            sample["label"] != index
            or len(data) != length
            or data[:16] != head
            or data[-16:] != tail
        ):
            bad += 1
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    return elapsed, cpu, bad


def time_copy_floor(
    payloads: list[bytes], order: list[int], ends: list[tuple[int, Any, Any]]
) -> float:
    """No library: copy each payload out of memory into a new ``bytes``, in ``order``.

    The same per-sample checks as ``time_read``. This is the least any reader that returns
    ``bytes`` (one copy per value) must spend on this machine: it bounds the ratio a copying
    read can reach against the reference, whatever the reader does besides.
    """
    views = [memoryview(payload) for payload in payloads]
    bad = 0
    gc.collect()
    started = time.perf_counter()
    for index in order:
        data = bytes(views[index])
        length, head, tail = ends[index]
        if len(data) != length or data[:16] != head or data[-16:] != tail:
            bad += 1
    elapsed = time.perf_counter() - started
    if bad:
        raise SystemExit(f"the copy floor pass returned {bad} wrong copies")
    return elapsed


def read_all(open_dataset: Any, folder: str, order: list[int]) -> list[Any]:
    """Untimed: every sample's data by id, read in ``order``, for the full digest check."""
    dataset = open_dataset(folder)
    returned: list[Any] = [None] * len(order)
    for index in order:
        returned[index] = bytes(dataset[index]["data"])
    return returned


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", required=True, choices=["shardstream", "streaming"])
    parser.add_argument("--workload", required=True, help="a name, used in folder names")
    parser.add_argument("--samples", type=int, required=True)
    parser.add_argument("--size", type=int, required=True, help="payload bytes per sample")
    parser.add_argument("--jitter", type=int, default=0, help="payload size varies by +- this")
    parser.add_argument("--seed", type=int, default=0, help="seed of the payloads")
    parser.add_argument("--order-seed", type=int, default=1, help="seed of the read order")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tmp", required=True, help="an existing folder for the datasets")
    parser.add_argument("--result", required=True, help="where the JSON result goes")
    parser.add_argument("--keep", action="store_true", help="keep the last dataset written")
    parser.add_argument(
        "--kind", choices=["bytes", "tokens"], default="bytes", help="tokens: ndarray:uint16:2048"
    )
    parser.add_argument(
        "--skip-write",
        action="store_true",
        help="profiling aid: write once untimed, time only the reads",
    )
    args = parser.parse_args()

    import_started = time.perf_counter()
    writer_class, open_dataset, open_zero_copy, version = import_library(args.lib)
    import_seconds = time.perf_counter() - import_started
    numpy_import_seconds = import_started - _import_started

    # --- Untimed: generate the data, the samples and the read order. ---
    payloads, lengths = generate(args.samples, args.size, args.jitter, args.seed)
    expected_digest = digest_payloads(payloads)
    columns = COLUMNS
    values: list[Any] = payloads
    if args.kind == "tokens":
        if args.size != 4096 or args.jitter:
            raise SystemExit("--kind tokens needs --size 4096 --jitter 0 (2,048 uint16 tokens)")
        columns = TOKEN_COLUMNS
        values = [np.frombuffer(payload, dtype=np.uint16) for payload in payloads]
    samples = [{"data": value, "label": index} for index, value in enumerate(values)]
    order = np.random.default_rng(args.order_seed).permutation(args.samples).tolist()
    gc.collect()
    gc.freeze()  # the pre-generated data is never garbage: keep collections from walking it

    # --- Write: each repeat into a fresh folder; the last one is kept for reading. ---
    write_times: list[float] = []
    folder = ""
    repeats = 1 if args.skip_write else args.repeats
    for repeat in range(repeats):
        if folder:
            shutil.rmtree(folder)
        folder = os.path.join(args.tmp, f"{args.lib}-{args.workload}-{repeat}")
        if hasattr(os, "sync"):
            os.sync()  # flush earlier writes so their writeback does not slow this one
        gc.collect()
        write_times.append(time_write(writer_class, folder, samples, columns))
    del samples
    dataset_bytes = sum(
        os.path.getsize(os.path.join(parent, name))
        for parent, _, names in os.walk(folder)
        for name in names
    )

    # --- Read: warm the page cache once and check every byte in an untimed pass, then time
    # each pass over a fresh dataset object. ---
    warm_page_cache(folder)
    ends: list[tuple[int, Any, Any]]
    if args.kind == "tokens":
        ends = [(len(v), int(v[0]), int(v[-1])) for v in values]
    else:
        ends = [(len(p), bytes(p[:16]), bytes(p[-16:])) for p in payloads]
    del values
    failures = 0
    digests_ok = True
    timings: dict[str, tuple[list[float], list[float]]] = {}
    modes = {"read": open_dataset}
    if open_zero_copy is not None:  # shardstream also reads without copying, on request
        modes["read_zero_copy"] = open_zero_copy
    for mode, opener in modes.items():
        returned = read_all(opener, folder, order)
        digests_ok &= None not in returned and digest_payloads(returned) == expected_digest
        del returned
        times, cpus = timings[mode] = ([], [])
        for repeat in range(-1, args.repeats):
            elapsed, cpu, bad = time_read(opener, folder, order, ends)
            if repeat >= 0:
                times.append(elapsed)
                cpus.append(cpu)
            failures += bad
    read_times, read_cpu = timings["read"]
    copy_floor_times: list[float] = []
    if args.kind == "bytes":
        for repeat in range(-1, args.repeats):
            elapsed = time_copy_floor(payloads, order, ends)
            if repeat >= 0:
                copy_floor_times.append(elapsed)

    files = file_digests(folder)
    if not args.keep:
        shutil.rmtree(folder)

    result = {
        "lib": args.lib,
        "version": version,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "platform": platform.platform(),
        "import_seconds": import_seconds,
        "numpy_import_seconds": numpy_import_seconds,
        "params": {
            "samples": args.samples,
            "size": args.size,
            "jitter": args.jitter,
            "seed": args.seed,
            "order_seed": args.order_seed,
            "repeats": args.repeats,
            "kind": args.kind,
            "columns": columns,
        },
        "payload_bytes": sum(lengths),
        "data_sha256": expected_digest,
        "dataset_bytes": dataset_bytes,
        "write_seconds": None if args.skip_write else summary(write_times),
        "read_seconds": summary(read_times),
        "read_cpu_seconds": summary(read_cpu),
        "read_samples_per_s": {
            "best": args.samples / min(read_times),
            "median": args.samples / statistics.median(read_times),
        },
        "read_zero_copy_samples_per_s": None
        if "read_zero_copy" not in timings
        else {
            "best": args.samples / min(timings["read_zero_copy"][0]),
            "median": args.samples / statistics.median(timings["read_zero_copy"][0]),
        },
        "copy_floor_samples_per_s": None
        if not copy_floor_times
        else {
            "best": args.samples / min(copy_floor_times),
            "median": args.samples / statistics.median(copy_floor_times),
        },
        "checks": {
            "sample_failures": failures,
            "data_digest_ok": digests_ok,
            "passed": failures == 0 and digests_ok,
        },
        "files": files,
    }
    with open(args.result, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
