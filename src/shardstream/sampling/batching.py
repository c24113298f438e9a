"""Global batches that draw on streams by rule: stratified, per stream, device per stream.

``stratified``: every global batch holds each stream's share of the epoch, rounded (largest
remainders get the leftover places); stream ``s`` fills its ``g_s`` places of step ``k`` with
positions ``k * g_s .. (k + 1) * g_s - 1`` of its own order. ``per_stream``: each global batch
comes whole from one stream; with shuffling the order of the streams' batches is shuffled.
``device_per_stream``: each *device* batch comes whole from one stream; the streams' device-size
chunks are ordered (shuffled with shuffling) and dealt to the devices of each step in turn. A
device batch's size depends on the number of ranks, so unlike the others this method gives the
same global steps only for the same number of ranks.

Both keep only whole, pure global batches: the samples left over are counted in ``dropped``
(the plan reports them; they are never silently lost). A stream too small for its places in
one stratified batch, or whose share rounds to no place at all, is an error: none of its
samples would ever be read. Each stream is shuffled with its own
seed, derived from the run's. Both resume at the global batch ``drop_first`` falls in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from shardstream.errors import ConfigurationError
from shardstream.sampling.distinct import distinct
from shardstream.sampling.mixing import EpochUnits
from shardstream.sampling.partition import device_offsets, worker_steps
from shardstream.sampling.sequence import ShuffleConfig, sequence_ids, stream_shuffle
from shardstream.sampling.spans import make_rng
from shardstream.sampling.topology import Topology

__all__ = [
    "StepBatches",
    "device_per_stream_batches",
    "per_stream_batches",
    "stratified_batches",
    "stream_portions",
]

TAG_STEP_ORDER = 31  # [seed, epoch, TAG]: the order of per_stream's batches.


@dataclass(frozen=True)
class StepBatches:
    """A worker's device batches under a stream-aware batching method."""

    ids: NDArray[np.int64]
    num_steps: int
    dropped: int


def stream_portions(stream_sizes: NDArray[np.int64], global_batch_size: int) -> NDArray[np.int64]:
    """Places per global batch for each stream: its share, rounded by largest remainders."""
    total = int(stream_sizes.sum())
    if total == 0:
        return np.zeros(len(stream_sizes), np.int64)
    exact = stream_sizes * global_batch_size / total
    portions = np.floor(exact).astype(np.int64)
    leftover = global_batch_size - int(portions.sum())
    ranked = np.argsort(-(exact - portions), kind="stable")  # ties: the lower stream first
    portions[ranked[:leftover]] += 1
    return portions


def _streams(units: EpochUnits, count: int = 0) -> list[EpochUnits]:
    """Each stream's units: at least ``count`` streams (the last may have none this epoch)."""
    if len(units.sizes):
        count = max(count, int(units.stream_of_unit.max()) + 1)
    return [units.of_stream(stream) for stream in range(count)]


def _check_strata(
    sizes: NDArray[np.int64], portions: NDArray[np.int64], global_batch_size: int,
    names: Sequence[str],
) -> None:  # fmt: skip
    """Refuse a stream that no stratified global batch would hold: its samples go unread.

    Raises:
        ConfigurationError: A stream's share of a global batch rounds to no place, or it has
            fewer samples in the epoch than its places in one batch.
    """
    total = int(sizes.sum())
    for stream, (size, places) in enumerate(zip(sizes.tolist(), portions.tolist(), strict=True)):
        name = f"stream {stream}" + (f" ({names[stream]})" if stream < len(names) else "")
        if places == 0:
            raise ConfigurationError(
                f"stratified batching: {name} gives {size} of the epoch's {total} samples, "
                f"a share of a global batch of {global_batch_size} that rounds to no place, so "
                "none of them would be read. Raise the global batch size (batch_size x ranks) "
                "or the stream's weight"
            )
        if size < places:
            raise ConfigurationError(
                f"stratified batching: {name} gives {size} samples to the epoch, fewer than "
                f"the {places} places it takes in each global batch of {global_batch_size}, "
                "so not one global batch can be made. Give the stream more weight (repeat, "
                "choose) or lower the batch size"
            )


def _check_whole(
    sizes: NDArray[np.int64], unit: int, names: Sequence[str], method: str, what: str
) -> None:
    """Refuse a stream too small for one whole batch of its own: its samples go unread.

    Raises:
        ConfigurationError: A stream has fewer samples in the epoch than ``unit``.
    """
    for stream, size in enumerate(sizes.tolist()):
        if size < unit:
            name = f"stream {stream}" + (f" ({names[stream]})" if stream < len(names) else "")
            raise ConfigurationError(
                f"{method} batching: {name} gives {size} samples to the epoch, fewer than one "
                f"{what} of {unit}, so none of them would be read. Give the stream more weight "
                "(repeat, choose) or lower the batch size"
            )


def stratified_batches(
    units: EpochUnits,
    topology: Topology,
    global_batch_size: int,
    batch_size: int,
    drop_first: int,
    *,
    num_canonical_nodes: int,
    epoch: int,
    shuffle: ShuffleConfig,
    stream_names: Sequence[str] = (),
) -> StepBatches:
    """The worker's device batches when every global batch holds each stream in proportion.

    Raises:
        ConfigurationError: A stream is too small for one global batch (see
            :func:`_check_strata`); ``stream_names`` name the streams in the message.
    """
    parts = _streams(units, len(stream_names))
    sizes = np.array([part.epoch_size for part in parts], np.int64)
    portions = stream_portions(sizes, global_batch_size)
    _check_strata(sizes, portions, global_batch_size, stream_names)
    steps = int((sizes // portions).min()) if len(sizes) else 0
    first = min(drop_first // global_batch_size, steps)
    step_ids = worker_steps(first, steps, topology)
    offsets = device_offsets(topology, batch_size)
    starts = np.concatenate([[0], np.cumsum(portions)])
    stream_of_offset = np.searchsorted(starts[1:], offsets, side="right")
    ids = np.empty((len(step_ids), batch_size), np.int64)
    for stream in distinct(stream_of_offset).tolist():
        columns = stream_of_offset == stream
        positions = step_ids[:, None] * portions[stream] + (offsets[columns] - starts[stream])
        ids[:, columns] = sequence_ids(
            parts[stream], positions, num_canonical_nodes=num_canonical_nodes, epoch=epoch,
            shuffle=stream_shuffle(shuffle, stream),
        )  # fmt: skip
    return StepBatches(ids, steps - first, units.epoch_size - steps * global_batch_size)


def _chunks_in_order(
    counts: NDArray[np.int64], shuffle: ShuffleConfig, epoch: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``(stream, index within the stream)`` of every chunk, streams in turn or shuffled."""
    stream = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    index = np.arange(len(stream), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    if shuffle.shuffle:
        order = make_rng(shuffle.seed, epoch, TAG_STEP_ORDER).permutation(len(stream))
        stream, index = stream[order], index[order]
    return stream, index


def per_stream_batches(
    units: EpochUnits,
    topology: Topology,
    global_batch_size: int,
    batch_size: int,
    drop_first: int,
    *,
    num_canonical_nodes: int,
    epoch: int,
    shuffle: ShuffleConfig,
    stream_names: Sequence[str] = (),
) -> StepBatches:
    """The worker's device batches when each global batch comes from one stream.

    Raises:
        ConfigurationError: A stream has fewer samples than one global batch.
    """
    parts = _streams(units, len(stream_names))
    sizes = np.array([part.epoch_size for part in parts], np.int64)
    _check_whole(sizes, global_batch_size, stream_names, "per_stream", "global batch")
    stream_of_step, batch_of_step = _chunks_in_order(sizes // global_batch_size, shuffle, epoch)
    steps = len(stream_of_step)
    first = min(drop_first // global_batch_size, steps)
    step_ids = worker_steps(first, steps, topology)
    ids = _chunk_samples(
        parts, stream_of_step[step_ids], batch_of_step[step_ids], global_batch_size,
        device_offsets(topology, batch_size), num_canonical_nodes, epoch, shuffle,
    )  # fmt: skip
    return StepBatches(ids, steps - first, int((sizes % global_batch_size).sum()))


def device_per_stream_batches(
    units: EpochUnits,
    topology: Topology,
    global_batch_size: int,
    batch_size: int,
    drop_first: int,
    *,
    num_canonical_nodes: int,
    epoch: int,
    shuffle: ShuffleConfig,
    stream_names: Sequence[str] = (),
) -> StepBatches:
    """The worker's device batches when each device batch comes from one stream.

    Raises:
        ConfigurationError: A stream has fewer samples than one device batch.
    """
    parts = _streams(units, len(stream_names))
    sizes = np.array([part.epoch_size for part in parts], np.int64)
    _check_whole(sizes, batch_size, stream_names, "device_per_stream", "device batch")
    stream_of_chunk, index_of_chunk = _chunks_in_order(sizes // batch_size, shuffle, epoch)
    devices = topology.world_size
    steps = len(stream_of_chunk) // devices
    first = min(drop_first // global_batch_size, steps)
    step_ids = worker_steps(first, steps, topology)
    chunks = step_ids * devices + topology.rank  # this rank's chunk of each of its steps
    ids = _chunk_samples(
        parts, stream_of_chunk[chunks], index_of_chunk[chunks], batch_size,
        np.arange(batch_size, dtype=np.int64), num_canonical_nodes, epoch, shuffle,
    )  # fmt: skip
    return StepBatches(ids, steps - first, units.epoch_size - steps * global_batch_size)


def _chunk_samples(
    parts: list[EpochUnits],
    streams: NDArray[np.int64],
    chunks: NDArray[np.int64],
    chunk_size: int,
    offsets: NDArray[np.int64],
    num_canonical_nodes: int,
    epoch: int,
    shuffle: ShuffleConfig,
) -> NDArray[np.int64]:
    """Row ``i``: the samples at ``offsets`` of chunk ``chunks[i]`` of stream ``streams[i]``."""
    ids = np.empty((len(chunks), len(offsets)), np.int64)
    for stream in distinct(streams).tolist():
        rows = streams == stream
        positions = chunks[rows][:, None] * chunk_size + offsets
        ids[rows] = sequence_ids(
            parts[stream], positions, num_canonical_nodes=num_canonical_nodes, epoch=epoch,
            shuffle=stream_shuffle(shuffle, stream),
        )  # fmt: skip
    return ids
