"""Where bytes live: local files and object stores, chosen by URL."""

from shardstream.storage.base import ObjectStore
from shardstream.storage.local import LocalStore, atomic_write
from shardstream.storage.registry import is_remote, local_path, open_store

__all__ = ["LocalStore", "ObjectStore", "atomic_write", "is_remote", "local_path", "open_store"]
