"""Writes and reads the interop datasets with mosaicml-streaming 0.13, in its own venv.

The job file says what to write and read, so the test suite can compare both libraries.

Usage: python ref_worker.py JOB.json
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cases import COLUMNS, dump, make_samples


def _write(case: dict[str, Any], out: str) -> None:
    from streaming import CSVWriter, JSONWriter, MDSWriter, TSVWriter, XSVWriter

    writers = {"mds": MDSWriter, "json": JSONWriter, "csv": CSVWriter, "tsv": TSVWriter}
    fmt = case.get("format", "mds")
    kwargs = dict(case.get("writer", {}))
    columns = COLUMNS[case["generator"]]
    if fmt == "xsv":
        writer_cls = XSVWriter
        kwargs.setdefault("separator", "|")
    else:
        writer_cls = writers[fmt]
    samples = make_samples(case)
    parts = case.get("parts")
    if not parts:
        with writer_cls(out=out, columns=columns, **kwargs) as writer:
            for sample in samples:
                writer.write(sample)
        return
    start = 0
    for number, count in enumerate(parts):
        with writer_cls(out=os.path.join(out, str(number)), columns=columns, **kwargs) as writer:
            for sample in samples[start : start + count]:
                writer.write(sample)
        start += count
    from streaming.base.util import merge_index

    merge_index(out)


def _read(folder: str, path: str) -> None:
    # StreamingDataset (not LocalDataset, which cannot decompress) over a local-only folder.
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    dataset = StreamingDataset(local=folder, batch_size=1, allow_unsafe_types=True)
    dump([dataset.get_item(i) for i in range(dataset.num_samples)], path)
    del dataset
    clean_stale_shared_memory()


def main() -> None:
    with open(sys.argv[1]) as handle:
        job = json.load(handle)
    for item in job.get("write", []):
        _write(item["case"], item["out"])
    for item in job.get("read", []):
        _read(item["dir"], item["dump"])


if __name__ == "__main__":
    main()
