"""Reading datasets: map-style access to local MDS datasets."""

from shardstream.dataset.local import LocalDataset

__all__ = ["LocalDataset"]
