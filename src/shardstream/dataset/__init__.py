"""Reading datasets: map-style access to local MDS datasets."""

from shardstream.dataset.local import LocalDataset
from shardstream.dataset.world import detect_topology

__all__ = ["LocalDataset", "detect_topology"]
