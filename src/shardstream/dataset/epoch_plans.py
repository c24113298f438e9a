"""The plan of an epoch from a dataset's settings and loaded data, and what it says of it.

Which samples a worker reads in an epoch, in which order and batches
(:class:`~shardstream.sampling.EpochPlan`): from the streams' draw of that epoch, the
settings' shuffle and batching, and the job's shape. Node orders are kept in the node's
state folder for runs that resume.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from shardstream.cache import EpochStart, NodeOrders
from shardstream.dataset.prepared import PreparedDataset
from shardstream.dataset.settings import DatasetSettings
from shardstream.sampling import EpochPlan, Topology, resample

__all__ = ["epoch_plan", "log_layout"]

logger = logging.getLogger("shardstream.dataset.streaming")  # where users look for it


def epoch_plan(
    settings: DatasetSettings,
    data: PreparedDataset,
    start: EpochStart,
    topology: Topology,
    *,
    initial_nodes: int | None,
    state_folder: str | None,
) -> EpochPlan:
    """The samples ``topology``'s worker reads in the epoch ``start`` names.

    Args:
        settings: The dataset's settings (``batch_size`` given).
        data: What they loaded.
        start: The epoch, and the samples of it consumed already.
        topology: The worker's place in the job.
        initial_nodes: The physical nodes of a loaded state's run (``None``: this run's).
        state_folder: The node-wide state folder, where node orders are kept (``None``: not
            kept).
    """
    assert settings.batch_size is not None
    units = resample(
        data.stream_shard_sizes, data.choices, seed=settings.shuffle_seed, epoch=start.epoch,
        sampling_method=settings.sampling_method,
        sampling_granularity=settings.sampling_granularity,
    )  # fmt: skip
    nodes = settings.canonical_nodes(topology, initial_nodes)
    memo = None  # node orders kept for runs that resume; a cache limit counts shards only
    if state_folder is not None and data.cache.limit is None:
        folder = os.path.join(state_folder, "plans")
        memo = NodeOrders(folder, units.sizes, nodes, start.epoch, settings.shuffle_config)
    return EpochPlan.for_worker(
        units,
        topology=topology,
        num_canonical_nodes=nodes,
        global_batch_size=settings.batch_size * topology.world_size,
        epoch=start.epoch,
        shuffle=settings.shuffle_config,
        drop_first=start.drop_first,
        batching_method=settings.batching_method,
        memo=memo,
        stream_names=[stream.remote or stream.local for stream in data.resolved],
    )


def log_layout(
    plan: EpochPlan, epoch: int, topology: Topology, batching_method: str,
    level: Callable[[str, int], int],
) -> None:  # fmt: skip
    """Say in the log which samples ``epoch`` leaves out or repeats, from its first worker.

    ``level(note, level)``: the level to say ``note`` at (lower once it has been said).
    """
    if topology.global_worker != 0:  # said once per job, not by every worker
        return
    if plan.dropped:
        logger.log(
            level(f"dropped {plan.dropped}", logging.WARNING),
            "epoch %d: %d samples fit no whole %s batch and are left out",
            epoch, plan.dropped, batching_method,
        )  # fmt: skip
    if plan.padding:
        logger.log(
            level(f"padding {plan.padding}", logging.INFO),
            "epoch %d: %d samples are repeated so that each of the %d ranks gets as many",
            epoch, plan.padding, topology.world_size,
        )  # fmt: skip
