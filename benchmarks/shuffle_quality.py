"""Shuffle quality against shard downloads: a simulation over the pure sampling core.

    .venv/bin/python benchmarks/shuffle_quality.py [--plot docs/img/sampling.png]

Every worker's plan comes from ``EpochPlan.for_worker``; from them the script rebuilds what each
global step holds and the order in which each physical node consumes its samples, then measures:

* ``shards/batch``: distinct shards in a global batch, averaged over the epoch's steps (local
  mixing: how many sources one optimiser step sees; higher is better);
* ``displacement``: the mean distance, as a fraction of the epoch, between a sample's epoch
  position and the position it has with shuffling off (global mixing: how far the storage
  order is broken up; a uniform random permutation gives about 1/3, shuffling off 0);
* downloads per physical node: the node's samples, in the order it consumes them, through an
  LRU cache holding ``capacity`` shards; each miss is one shard download. Reported as the mean
  over nodes and as a multiple of the minimum (the distinct shards the node reads).

Only ``shardstream.sampling`` and numpy; matplotlib is imported when ``--plot`` is given.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from shardstream.sampling import ShuffleConfig
from shardstream.sampling.simulation import (
    JobShape,
    displacement,
    epoch_order,
    lru_misses,
    node_sequence,
    positions_of,
    shard_of,
    shards_per_batch,
    step_batches,
)

Setup = JobShape  # the simulated dataset and job (uniform shards by default here)

ALGORITHMS = ("naive", "py1s", "py2s", "py1b", "py1br", "py1e")
BLOCKED = ("py1b", "py1br", "py1e")  # the algorithms whose result depends on the block size


@dataclass(frozen=True)
class Case:
    """One row of the table: a shuffle configuration and its label."""

    label: str
    config: ShuffleConfig


@dataclass
class Result:
    """The measures of one case (downloads keyed by cache capacity in shards)."""

    label: str
    shards_per_batch: float
    displacement: float
    min_downloads: float
    downloads: dict[int, float] = field(default_factory=dict)
    ratio: dict[int, float] = field(default_factory=dict)


def cases(block_sizes: tuple[int, ...], seed: int = 9176) -> list[Case]:
    """Shuffle off, then each algorithm; the blocked ones once per block size."""
    out = [Case("off", ShuffleConfig(shuffle=False, seed=seed))]
    for algo in ALGORITHMS:
        blocks: tuple[int | None, ...] = block_sizes if algo in BLOCKED else (None,)
        for block in blocks:
            if block is None:
                label = algo
            elif block & (block - 1) == 0:  # a power of two
                label = f"{algo} B=2^{block.bit_length() - 1}"
            else:
                label = f"{algo} B={block}"
            out.append(Case(label, ShuffleConfig(True, algo, seed, block)))
    return out


@lru_cache(maxsize=4)
def unshuffled_positions(setup: Setup) -> NDArray[np.int64]:
    """The epoch position of each sample with shuffling off (through the same plans)."""
    order = epoch_order(setup, step_batches(setup, ShuffleConfig(shuffle=False, seed=setup.seed)))
    positions = positions_of(order[: setup.epoch_size])
    positions.setflags(write=False)  # shared by every caller
    return positions


def measure(setup: Setup, case: Case, capacities: tuple[int, ...]) -> Result:
    """Every measure of one case."""
    batches = step_batches(setup, case.config)
    shards = shard_of(setup.shard_sizes, batches)
    order = epoch_order(setup, batches)[: setup.epoch_size]
    per_node = [node_sequence(setup, shards, node) for node in range(setup.nodes)]
    minimum = [len(np.unique(seq)) for seq in per_node]
    result = Result(
        case.label,
        shards_per_batch(shards.reshape(len(shards), -1)),
        displacement(positions_of(order), unshuffled_positions(setup)),
        float(np.mean(minimum)),
    )
    for capacity in capacities:
        misses = [lru_misses(seq, capacity) for seq in per_node]
        result.downloads[capacity] = float(np.mean(misses))
        result.ratio[capacity] = float(np.mean(np.divide(misses, minimum)))
    return result


def table(results: list[Result], capacities: tuple[int, ...]) -> str:
    """The results as a Markdown table."""
    head = ["shuffle", "shards/batch", "displacement", "min/node"]
    head += [f"downloads/node, LRU {capacity}" for capacity in capacities]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in results:
        cells = [
            r.label,
            f"{r.shards_per_batch:.1f}",
            f"{r.displacement:.3f}",
            f"{r.min_downloads:.0f}",
        ]
        cells += [f"{r.downloads[c]:,.0f} ({r.ratio[c]:.1f}x)" for c in capacities]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


TINY = Setup(
    shard_sizes=(8, 7, 9, 8, 6, 8, 7, 5),
    num_canonical_nodes=4,
    nodes=2,
    ranks_per_node=2,
    workers_per_rank=2,
    device_batch=2,
    seed=3,
)
"""The layout panel's example: 58 samples, 8 shards, NCN 4, 2 nodes x 2 ranks, batch 2.

58 does not split over the 4 ranks: the short last step holds the last 2 samples and 2
repeats of the first, one place per rank.
"""


def plot(
    path: Path, setup: Setup, results: list[Result], capacities: tuple[int, ...]
) -> None:  # pragma: no cover - drawing only
    """Left: the tiny example's layout. Then, for every case, quality beside downloads."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fig, (left, middle, right) = plt.subplots(
        1, 3, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1.15, 0.7, 0.9]}
    )
    # Left: which shard (colour) and sample (number) each position of each global step holds;
    # a short last step leaves places empty (-1).
    tiny = TINY
    batches = step_batches(tiny, ShuffleConfig(True, "py1s", tiny.seed))
    order = epoch_order(tiny, batches).reshape(len(batches), tiny.global_batch)
    shard = shard_of(tiny.shard_sizes, order)
    colours = plt.get_cmap("tab10")
    steps, width = order.shape
    for k in range(steps):
        for o in range(width):
            position = k * width + o
            if order[k, o] < 0:
                continue
            padded = position >= tiny.epoch_size
            left.add_patch(
                Rectangle(
                    (o, k), 1, 1, facecolor=colours(int(shard[k, o])), edgecolor="white",
                    alpha=0.35 if padded else 0.85, hatch="//" if padded else None,
                )
            )  # fmt: skip
            left.text(o + 0.5, k + 0.5, str(order[k, o]), ha="center", va="center", fontsize=8)
    ranks_per_node, nodes = tiny.ranks_per_node, tiny.nodes
    labels = []
    for o in range(width):
        node, rest = o % nodes, o // nodes
        labels.append(f"c{o % tiny.num_canonical_nodes}\nn{node}r{rest % ranks_per_node}")
    left.set_xticks(np.arange(width) + 0.5, labels, fontsize=7)
    left.set_yticks(
        np.arange(steps) + 0.5, [f"step {k} (w{k % tiny.workers_per_rank})" for k in range(steps)]
    )
    left.tick_params(axis="y", labelsize=7)
    left.set_xlim(0, width)
    left.set_ylim(steps, 0)
    left.xaxis.tick_top()
    left.set_title(
        "58 samples in 8 shards (colour; number = sample id), py1s, NCN 4, 2 nodes x 2 ranks\n"
        "x 2 workers, device batch 2. Row = global step (G = 8), w = the DataLoader worker;\n"
        "column = offset in the step: canonical node c, node n, rank r. The last step is\n"
        "short: one sample a rank; hatched = repeated so that each rank gets as many",
        fontsize=7.5,
    )
    left.set_aspect("equal")
    for side in ("right", "bottom"):
        left.spines[side].set_visible(False)

    # Middle and right: per case, the quality (higher is better) beside the downloads (lower
    # is better) for each cache capacity.
    rows = np.arange(len(results))
    labels = [r.label for r in results]
    middle.barh(rows, [r.shards_per_batch for r in results], color="C0")
    for row, r in zip(rows, results, strict=True):
        middle.text(r.shards_per_batch, row, f" {r.shards_per_batch:.0f}", va="center", fontsize=7)
    middle.set_yticks(rows, labels, fontsize=8)
    middle.set_ylim(len(results) - 0.5, -0.5)
    middle.set_xlim(0, 1.25 * max(r.shards_per_batch for r in results))
    middle.set_xlabel(f"distinct shards per global batch\n(G = {setup.global_batch}; higher is "
                      "better)", fontsize=8)  # fmt: skip
    height = 0.8 / len(capacities)
    for i, c in enumerate(capacities):
        ratios = [r.ratio[c] for r in results]
        right.barh(rows - 0.4 + (i + 0.5) * height, ratios, height=height, color=f"C{i + 1}",
                   label=f"LRU cache of {c} shards")  # fmt: skip
    right.set_xscale("log")
    right.set_xlim(0.8, None)
    right.axvline(1, color="black", lw=0.8)
    right.set_xlabel("shard downloads per node, as a multiple of\nthe distinct shards it reads "
                     "(lower is better)", fontsize=8)  # fmt: skip
    right.tick_params(labelleft=False)
    right.grid(True, axis="x", which="major", alpha=0.3)
    right.set_ylim(len(results) - 0.5, -0.5)
    right.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False)
    for axis in (middle, right):
        axis.tick_params(axis="x", labelsize=7)
    middle.set_title(
        f"{len(setup.shard_sizes):,} shards x {setup.shard_sizes[0]:,} samples, NCN "
        f"{setup.num_canonical_nodes},\n{setup.nodes} nodes x {setup.ranks_per_node} ranks, "
        f"device batch {setup.device_batch}, one epoch",
        fontsize=8,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=2000)
    parser.add_argument("--shard-size", type=int, default=1000)
    parser.add_argument("--blocks", type=int, nargs="+", default=[1 << 14, 1 << 16])
    parser.add_argument("--capacities", type=int, nargs="+", default=[16, 64, 128])
    parser.add_argument("--plot", type=Path, help="write the figure (PNG) here")
    parser.add_argument("--out", type=Path, help="write every result (JSON) here")
    args = parser.parse_args()
    start = time.perf_counter()
    setup = Setup(shard_sizes=(args.shard_size,) * args.shards)
    capacities = tuple(args.capacities)
    print(setup.describe())
    results = [measure(setup, case, capacities) for case in cases(tuple(args.blocks), setup.seed)]
    print(table(results, capacities))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "benchmark": "shuffle-quality",
            "setup": setup.describe(),
            "shards": args.shards,
            "shard_size": args.shard_size,
            "capacities": list(capacities),
            "results": [dataclasses.asdict(result) for result in results],
        }
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    if args.plot:
        plot(args.plot, setup, results, capacities)
        print(f"figure: {args.plot}")
    print(f"{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
