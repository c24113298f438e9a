"""Reading datasets: map-style access to local MDS datasets, and streaming.

``shardstream.dataset.streaming`` imports torch, so it is imported on demand.
"""

from shardstream.dataset.local import LocalDataset
from shardstream.dataset.stream import Stream
from shardstream.dataset.stream_registry import StreamRegistry, streams_registry
from shardstream.dataset.world import detect_topology

__all__ = ["LocalDataset", "Stream", "StreamRegistry", "detect_topology", "streams_registry"]
