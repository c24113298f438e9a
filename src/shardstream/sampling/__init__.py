"""Who reads what, in which order: pure functions over numpy arrays, no I/O and no torch."""

from shardstream.sampling.mixing import (
    EpochUnits,
    StreamWeight,
    derived_weights,
    parse_epoch_size,
    resample,
    stream_choices,
)
from shardstream.sampling.partition import EpochPartition, interleave
from shardstream.sampling.plan import BATCHING_METHODS, EpochPlan
from shardstream.sampling.sequence import ShuffleConfig, canonical_node_order, sequence_ids
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
    "BATCHING_METHODS",
    "DEFAULT_SHUFFLE_ALGORITHM",
    "SHUFFLE_ALGORITHMS",
    "EpochPartition",
    "EpochPlan",
    "EpochUnits",
    "NodeSpans",
    "ShuffleConfig",
    "ShuffleFunction",
    "Sourced",
    "StreamWeight",
    "Topology",
    "canonical_node_bounds",
    "canonical_node_order",
    "canonical_node_spans",
    "default_block_size",
    "derived_weights",
    "get_shuffle",
    "interleave",
    "parse_epoch_size",
    "resample",
    "resolve_topology",
    "sequence_ids",
    "shuffle_canonical_node",
    "stream_choices",
]
