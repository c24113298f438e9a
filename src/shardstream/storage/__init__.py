"""Where bytes live: local files and object stores, chosen by URL."""

from shardstream.storage.base import ObjectStore
from shardstream.storage.local import LocalStore, atomic_write
from shardstream.storage.registry import is_remote, local_path, open_store
from shardstream.storage.s3 import S3Store

__all__ = [
    "LocalStore",
    "ObjectStore",
    "S3Store",
    "atomic_write",
    "is_remote",
    "local_path",
    "open_store",
]
