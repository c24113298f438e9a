"""Samples to shards: the MDS writer, its background uploader, and index merging."""

from shardstream.writer.mds_writer import MDSWriter
from shardstream.writer.merge import merge_index

__all__ = ["MDSWriter", "merge_index"]
