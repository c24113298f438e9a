"""The node-local cache: shard files fetched once per node, and the locks and state behind it.

Locks die with their holder; the small per-rank state file replaces the reference's shared
memory.
"""

from shardstream.cache.index_sync import sync_index
from shardstream.cache.locks import FileLock
from shardstream.cache.node_orders import NodeOrders
from shardstream.cache.private_folder import ensure_private_folder
from shardstream.cache.run_state import EpochStart, RunState
from shardstream.cache.shard_cache import STATE_FOLDER, CacheStream, ShardCache
from shardstream.cache.shard_files import ShardFiles

__all__ = [
    "STATE_FOLDER",
    "CacheStream",
    "EpochStart",
    "FileLock",
    "NodeOrders",
    "RunState",
    "ShardCache",
    "ShardFiles",
    "ensure_private_folder",
    "sync_index",
]
