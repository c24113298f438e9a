"""What an epoch costs a cluster, before it runs: a simulation over the epoch plans.

Every rank's device batches come from :meth:`EpochPlan.for_worker`, exactly as a job computes
them; from them the simulation rebuilds what each global step holds and the order in which each
physical node reads its samples, then measures:

* shards per global batch: distinct shards one optimiser step sees (local mixing);
* displacement: the mean distance, as a fraction of the epoch, between a sample's position and
  its position with shuffling off (global mixing; a uniform permutation gives about 1/3);
* downloads per node: the node's reads through a least-recently-used cache of a given size
  (in shards or in bytes), against the minimum of one download per distinct shard;
* the cache a node needs so that no shard is downloaded twice in the epoch;
* the bytes a node must download before its first global step.

Pure numpy, like the rest of ``sampling``; the command line (``shardstream simulate``) and
``benchmarks/shuffle_quality.py`` print and plot it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from shardstream.sampling.partition import EpochPartition
from shardstream.sampling.plan import EpochPlan
from shardstream.sampling.sequence import ShuffleConfig
from shardstream.sampling.topology import Topology

__all__ = [
    "JobShape",
    "NodeCost",
    "displacement",
    "epoch_order",
    "lru_bytes",
    "lru_misses",
    "node_cost",
    "node_sequence",
    "positions_of",
    "shard_of",
    "shards_per_batch",
    "smallest_cache",
    "step_batches",
]


@dataclass(frozen=True)
class JobShape:
    """A dataset's shard sizes (samples) and the job that reads it."""

    shard_sizes: tuple[int, ...]
    num_canonical_nodes: int = 8
    nodes: int = 8
    ranks_per_node: int = 8
    workers_per_rank: int = 2
    device_batch: int = 32
    seed: int = 9176
    epoch: int = 0

    @property
    def world_size(self) -> int:
        """Ranks in the job."""
        return self.nodes * self.ranks_per_node

    @property
    def global_batch(self) -> int:
        """Samples per global step."""
        return self.device_batch * self.world_size

    @property
    def epoch_size(self) -> int:
        """Samples in the epoch."""
        return sum(self.shard_sizes)

    def describe(self) -> str:
        """One line for a report."""
        sizes = set(self.shard_sizes)
        shard = f"{sizes.pop():,}" if len(sizes) == 1 else "varied"
        return (
            f"{len(self.shard_sizes):,} shards x {shard} samples ({self.epoch_size:,}), "
            f"NCN {self.num_canonical_nodes}, {self.nodes} nodes x {self.ranks_per_node} ranks x "
            f"{self.workers_per_rank} workers, device batch {self.device_batch} "
            f"(global {self.global_batch})"
        )


def step_batches(shape: JobShape, config: ShuffleConfig) -> NDArray[np.int64]:
    """``[steps, ranks, device batch]`` sample ids: every rank's device batch at every step.

    Worker ``w`` of a rank delivers that rank's device batches ``w, w + W, ...`` (the
    DataLoader's round-robin). Where the last step is short, the places past each rank's last
    batch hold ``-1``.
    """
    sizes = np.asarray(shape.shard_sizes, dtype=np.int64)
    steps = EpochPartition(shape.epoch_size, shape.num_canonical_nodes, shape.global_batch,
                           ranks=shape.world_size)  # fmt: skip
    batch = shape.device_batch
    out = np.full((steps.num_steps, shape.world_size, batch), -1, dtype=np.int64)
    workers = shape.workers_per_rank
    for rank in range(shape.world_size):
        for worker in range(workers):
            topology = Topology(shape.nodes, shape.ranks_per_node, workers, rank, worker)
            plan = EpochPlan.for_worker(
                sizes,
                topology=topology,
                num_canonical_nodes=shape.num_canonical_nodes,
                global_batch_size=shape.global_batch,
                epoch=shape.epoch,
                shuffle=config,
            )
            whole = len(plan.ids) // batch
            mine = out[worker::workers, rank]
            mine[:whole] = plan.ids[: whole * batch].reshape(whole, batch)
            if whole < len(mine):  # the short last step
                mine[whole, : len(plan.ids) - whole * batch] = plan.ids[whole * batch :]
    return out


def epoch_order(shape: JobShape, batches: NDArray[np.int64]) -> NDArray[np.int64]:
    """The sample id at each epoch position (repeats included), from the step batches.

    Past the end of a short last step, ``-1``.

    Inside a step, rank ``r`` (node ``p``, rank-of-node ``q``) holds offsets
    ``p + P * (q + R * j)`` for ``j`` in its device batch.
    """
    ranks = np.arange(shape.world_size)
    node, of_node = ranks // shape.ranks_per_node, ranks % shape.ranks_per_node
    j = np.arange(shape.device_batch)
    within = node[:, None] + shape.nodes * (of_node[:, None] + shape.ranks_per_node * j[None, :])
    order = np.empty((len(batches), shape.global_batch), dtype=np.int64)
    order[:, within] = batches
    return order.reshape(-1)


def node_sequence(shape: JobShape, batches: NDArray[np.int64], node: int) -> NDArray[np.int64]:
    """What physical node ``node`` reads (ids or shards): step by step, its ranks in turn."""
    low = node * shape.ranks_per_node
    sequence = batches[:, low : low + shape.ranks_per_node].reshape(-1)
    return sequence[sequence >= 0]  # not the places a short last step leaves empty


def shard_of(shard_sizes: tuple[int, ...], samples: NDArray[np.int64]) -> NDArray[np.int64]:
    """The shard of each global sample id (``-1`` for ``-1``, a place left empty)."""
    ends = np.cumsum(np.asarray(shard_sizes, dtype=np.int64))
    shards = np.searchsorted(ends, samples, side="right").astype(np.int64)
    return np.where(samples < 0, -1, shards)


def shards_per_batch(shards: NDArray[np.int64]) -> float:
    """Mean distinct shards per row of ``[steps, global batch]`` shard ids (``-1``: none)."""
    ordered = np.sort(shards, axis=1)
    distinct = 1 + np.count_nonzero(np.diff(ordered, axis=1), axis=1) - (ordered[:, 0] < 0)
    return float(distinct.mean())


def positions_of(order: NDArray[np.int64]) -> NDArray[np.int64]:
    """The inverse of an epoch order without repeats: the position of each sample id."""
    positions = np.empty_like(order)
    positions[order] = np.arange(len(order), dtype=np.int64)
    return positions


def displacement(positions: NDArray[np.int64], reference: NDArray[np.int64]) -> float:
    """Mean ``|position - reference position|`` over samples, as a fraction of the epoch."""
    return float(np.abs(positions - reference).mean() / max(len(positions), 1))


def _runs(shards: NDArray[np.int64]) -> list[int]:
    """The access sequence without immediate repeats (which always hit)."""
    if len(shards) == 0:
        return []
    keep = np.concatenate(([True], shards[1:] != shards[:-1]))
    runs: list[int] = shards[keep].tolist()
    return runs


def lru_misses(shards: NDArray[np.int64], capacity: int) -> int:
    """Misses of an LRU cache of ``capacity`` shards over the access sequence ``shards``."""
    cache: OrderedDict[int, None] = OrderedDict()
    misses = 0
    for shard in _runs(shards):
        if shard in cache:
            cache.move_to_end(shard)
            continue
        misses += 1
        cache[shard] = None
        if len(cache) > capacity:
            cache.popitem(last=False)
    return misses


def lru_bytes(
    shards: NDArray[np.int64], shard_bytes: NDArray[np.int64], capacity: int
) -> tuple[int, int]:
    """``(bytes downloaded, downloads)`` through an LRU cache of ``capacity`` bytes.

    A shard larger than the whole cache is downloaded and dropped at once (the cache keeps
    at least the shard in use, as the real one does for the shard being read).
    """
    cache: OrderedDict[int, int] = OrderedDict()
    held = downloaded = downloads = 0
    for shard in _runs(shards):
        if shard in cache:
            cache.move_to_end(shard)
            continue
        size = int(shard_bytes[shard])
        downloaded += size
        downloads += 1
        cache[shard] = size
        held += size
        while held > capacity and len(cache) > 1:
            held -= cache.popitem(last=False)[1]
    return downloaded, downloads


def smallest_cache(shards: NDArray[np.int64], shard_bytes: NDArray[np.int64]) -> int:
    """The smallest LRU byte capacity with which no shard of ``shards`` is downloaded twice.

    Found by bisection between the largest shard and all distinct shards' bytes (downloads
    only fall as an LRU cache grows).
    """
    distinct = np.unique(shards)
    if len(distinct) == 0:
        return 0
    low = int(shard_bytes[distinct].max())
    high = int(shard_bytes[distinct].sum())
    minimum = len(distinct)
    if lru_bytes(shards, shard_bytes, low)[1] == minimum:
        return low
    while high - low > max(1, high // 1000):  # to 0.1%
        middle = (low + high) // 2
        if lru_bytes(shards, shard_bytes, middle)[1] == minimum:
            high = middle
        else:
            low = middle
    return high


@dataclass(frozen=True)
class NodeCost:
    """What one physical node downloads in the epoch."""

    node: int
    distinct_shards: int
    min_bytes: int
    downloads: int
    downloaded_bytes: int
    cache_needed: int
    first_step_bytes: int


def node_cost(
    shape: JobShape,
    shards: NDArray[np.int64],
    shard_bytes: NDArray[np.int64],
    node: int,
    cache_bytes: int,
) -> NodeCost:
    """One node's downloads over the epoch through an LRU cache of ``cache_bytes``.

    Args:
        shape: The job.
        shards: ``[steps, ranks, device batch]`` shard ids (``shard_of`` the step batches).
        shard_bytes: Bytes of each shard as stored.
        node: The physical node.
        cache_bytes: The node's cache limit.
    """
    sequence = node_sequence(shape, shards, node)
    distinct = np.unique(sequence)
    downloaded, downloads = lru_bytes(sequence, shard_bytes, cache_bytes)
    first = np.unique(node_sequence(shape, shards[:1], node))
    return NodeCost(
        node=node,
        distinct_shards=len(distinct),
        min_bytes=int(shard_bytes[distinct].sum()),
        downloads=downloads,
        downloaded_bytes=downloaded,
        cache_needed=smallest_cache(sequence, shard_bytes),
        first_step_bytes=int(shard_bytes[first].sum()),
    )
