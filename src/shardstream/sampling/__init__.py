"""Who reads what, in which order: pure functions over numpy arrays, no I/O and no torch."""

from shardstream.sampling.partition import EpochPartition, interleave
from shardstream.sampling.plan import EpochPlan, ShuffleConfig, canonical_node_order
from shardstream.sampling.shuffle import (
    DEFAULT_SHUFFLE_ALGORITHM,
    SHUFFLE_ALGORITHMS,
    NodeSpans,
    ShuffleFunction,
    canonical_node_bounds,
    canonical_node_spans,
    default_block_size,
    get_shuffle,
    shuffle_canonical_node,
)
from shardstream.sampling.topology import Sourced, Topology, resolve_topology

__all__ = [
    "DEFAULT_SHUFFLE_ALGORITHM",
    "SHUFFLE_ALGORITHMS",
    "EpochPartition",
    "EpochPlan",
    "NodeSpans",
    "ShuffleConfig",
    "ShuffleFunction",
    "Sourced",
    "Topology",
    "canonical_node_bounds",
    "canonical_node_order",
    "canonical_node_spans",
    "default_block_size",
    "get_shuffle",
    "interleave",
    "resolve_topology",
    "shuffle_canonical_node",
]
