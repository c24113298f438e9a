"""Makes the calls of api_cases.py on mosaicml-streaming 0.13, in its own venv; dumps results.

Usage: python ref_api_worker.py JOB.json   (the job names the datasets, a scratch folder and
the pickle to write)
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from api_cases import (
    SIZES_READ,
    TABLES,
    WEIGHTS,
    bad_values,
    builtin_name,
    files_of,
    keys,
    shard_facts,
    split_bad_samples,
)


def _dataset(job: dict[str, Any], name: str, weights: list[dict[str, Any]], **kwargs: Any) -> Any:
    from streaming import Stream, StreamingDataset

    scratch = os.path.join(job["scratch"], name)
    streams = [
        Stream(remote=remote, local=os.path.join(scratch, str(number)), **weight)
        for number, (remote, weight) in enumerate(zip(job["remotes"], weights, strict=True))
    ]
    return StreamingDataset(streams=streams, batch_size=4, **kwargs)


def _error(call: Any) -> str | None:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - whichever class it is, it is what is compared
        return str(builtin_name(exc))
    return None


def introspection(job: dict[str, Any]) -> dict[str, Any]:
    ds = _dataset(job, "tables", [{}, {}])
    out: dict[str, Any] = {
        "tables": {
            name: (getattr(ds, name).tolist(), str(getattr(ds, name).dtype)) for name in TABLES
        },
        "sizes": {
            name: (getattr(ds, name), type(getattr(ds, name)).__name__) for name in SIZES_READ
        },
        "shards": [shard_facts(shard) for shard in ds.shards],
        "keys": {name: _ids(ds[key]) for name, key in keys().items()},
        "bad_key": _error(lambda: ds[1.5]),
        "out_of_range": _error(lambda: ds[10**6]),
    }
    ds = _dataset(job, "cache", [{}, {}])  # nothing read yet
    last = ds.num_shards - 1
    folder = os.path.join(job["scratch"], "cache", "1")
    cache = [files_of(folder)]
    out["prepare"] = ds.prepare_shard(last)
    cache.append(files_of(folder))
    out["evict"] = ds.evict_shard(last)
    cache.append(files_of(folder))
    out["cache"] = cache
    out["prepare_out_of_range"] = _error(lambda: ds.prepare_shard(10**6))
    return out


def _ids(samples: Any) -> Any:
    if isinstance(samples, dict):
        return int(samples["id"])
    return [_ids(sample) for sample in samples]


def weights(job: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, (given, epoch_size) in WEIGHTS.items():
        ds = _dataset(job, f"weights-{name}", given, epoch_size=epoch_size)
        out[name] = [
            [
                (float(getattr(s, key)), type(getattr(s, key)).__name__)
                for key in ("proportion", "repeat", "choose")
            ]
            for s in ds.streams
        ]
    return out


def _write_split(writer: str, columns: dict[str, str], sample: dict[str, Any]) -> None:
    import streaming

    kwargs = {"separator": "|"} if writer == "XSVWriter" else {}
    with (
        tempfile.TemporaryDirectory() as out,
        getattr(streaming, writer)(out=out, columns=columns, **kwargs) as w,
    ):
        w.write(sample)


def errors(job: dict[str, Any]) -> dict[str, Any]:
    from streaming import MDSWriter, StreamingDataset

    def write(spec: str, value: Any) -> None:
        with tempfile.TemporaryDirectory() as out, MDSWriter(out=out, columns={"c": spec}) as w:
            w.write({"c": value})

    out: dict[str, Any] = {
        "values": {
            case: _error(lambda s=spec, v=value: write(s, v))
            for case, (spec, value) in bad_values().items()
        },
        "empty": _error(lambda: StreamingDataset(local=job["empty"], batch_size=4)),
        "split_samples": {
            case: _error(lambda w=writer, c=columns, s=sample: _write_split(w, c, s))
            for case, (writer, columns, sample) in split_bad_samples().items()
        },
    }
    tiny = _dataset(
        job,
        "stratified",
        [{"proportion": 0.99}, {"proportion": 0.01}],
        epoch_size=20,
        batching_method="stratified",
    )
    out["stratified"] = _error(lambda: next(iter(tiny)))
    return out


def main() -> None:
    import warnings

    from streaming.base.util import clean_stale_shared_memory

    warnings.filterwarnings("ignore")
    with open(sys.argv[1]) as handle:
        job = json.load(handle)
    clean_stale_shared_memory()
    result = {"introspection": introspection(job), "weights": weights(job), "errors": errors(job)}
    with open(job["out"], "wb") as handle:
        pickle.dump(result, handle)
    clean_stale_shared_memory()


if __name__ == "__main__":
    main()
