"""Who reads what, in which order: pure functions over numpy arrays, no I/O and no torch."""

from shardstream.sampling.topology import Sourced, Topology, resolve_topology

__all__ = ["Sourced", "Topology", "resolve_topology"]
