"""Where bytes live: local files and object stores, chosen by URL."""

from shardstream.storage.azure import AzureStore
from shardstream.storage.base import ObjectInfo, ObjectStore
from shardstream.storage.databricks import DatabricksVolumeStore
from shardstream.storage.download import (
    DownloadOptions,
    download_file,
    fetch_bytes,
    fetch_info,
    fetch_listing,
    timed_request,
)
from shardstream.storage.gcs import GCSStore
from shardstream.storage.http import HTTPStore
from shardstream.storage.local import LocalStore, atomic_write
from shardstream.storage.oci import OCIStore
from shardstream.storage.registry import is_remote, local_path, open_store
from shardstream.storage.s3 import S3Store

__all__ = [
    "AzureStore",
    "DatabricksVolumeStore",
    "DownloadOptions",
    "GCSStore",
    "HTTPStore",
    "LocalStore",
    "OCIStore",
    "ObjectInfo",
    "ObjectStore",
    "S3Store",
    "atomic_write",
    "download_file",
    "fetch_bytes",
    "fetch_info",
    "fetch_listing",
    "is_remote",
    "local_path",
    "open_store",
    "timed_request",
]
