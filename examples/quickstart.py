"""Quickstart: write a small MDS dataset, read it back, stream it into PyTorch, print a summary.

Run with ``scripts/demo`` (sets up the venv) or ``python examples/quickstart.py [OUT_DIR]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import time

import numpy as np

from shardstream import LocalDataset, MDSWriter, StreamingDataLoader, StreamingDataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", nargs="?", default="demo-data/quickstart", help="dataset folder")
    parser.add_argument("--samples", type=int, default=20_000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, args.samples)
    columns = {"text": "str", "label": "int", "features": "ndarray:float32:16"}
    started = time.perf_counter()
    with MDSWriter(out=args.out, columns=columns, compression="zstd", hashes=["xxh64"],
                   size_limit="1mb", exist_ok=True, progress_bar=True) as writer:  # fmt: skip
        for i in range(args.samples):
            writer.write({
                "text": f"sample {i} of class {labels[i]}",
                "label": int(labels[i]),
                "features": np.full(16, labels[i], np.float32),
            })  # fmt: skip
    write_seconds = time.perf_counter() - started

    dataset = LocalDataset(args.out, validate_hash="xxh64")
    started = time.perf_counter()
    order = rng.permutation(len(dataset))
    for i in order:
        sample = dataset[int(i)]
        if sample["label"] != labels[i] or sample["features"][0] != labels[i]:
            raise SystemExit(f"sample {i} read back wrong: {sample}")
    read_seconds = time.perf_counter() - started

    stored = sum(
        os.path.getsize(os.path.join(args.out, s.data_file.basename)) for s in dataset.shards
    )
    print(f"dataset:   {os.path.abspath(args.out)}")
    shards = len(dataset.shards)
    print(
        f"samples:   {len(dataset)} in {shards} shard{'s' if shards != 1 else ''}, "
        f"{stored / 1e6:.2f} MB (zstd)"
    )
    print(f"write:     {args.samples / write_seconds:,.0f} samples/s")
    print(
        f"read:      {len(dataset) / read_seconds:,.0f} samples/s "
        f"(random order, every sample checked)"
    )
    print(f"sample 0:  {dataset[0]['text']!r}, label {dataset[0]['label']}")

    # Stream it as a training job would: the folder stands in for a bucket, shards are cached
    # in a node-local folder, batches come shuffled from two DataLoader workers.
    streaming = StreamingDataset(
        remote=args.out, local=args.out.rstrip("/") + "-cache", batch_size=256, shuffle=True
    )
    loader = StreamingDataLoader(streaming, batch_size=256, num_workers=2)
    started = time.perf_counter()
    seen = np.zeros(len(dataset), np.int64)
    for batch in loader:
        ids = [int(text.split()[1]) for text in batch["text"]]
        if batch["label"].tolist() != labels[ids].tolist():
            raise SystemExit(f"a streamed batch does not match its samples: {ids[:4]}...")
        np.add.at(seen, ids, 1)
    stream_seconds = time.perf_counter() - started
    if not (seen == 1).all():
        raise SystemExit(f"{int((seen != 1).sum())} samples were not streamed exactly once")
    print(
        f"stream:    {int(seen.sum()):,} samples in {len(loader)} batches of up to 256, "
        f"{seen.sum() / stream_seconds:,.0f} samples/s (shuffled, 2 workers, each sample once)"
    )


if __name__ == "__main__":
    main()
