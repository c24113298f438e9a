"""Samples to shards: the MDS and split-format writers, their uploader, and index merging."""

from shardstream.writer.mds_writer import MDSWriter
from shardstream.writer.merge import merge_index
from shardstream.writer.split_writer import CSVWriter, JSONWriter, TSVWriter, XSVWriter

__all__ = ["CSVWriter", "JSONWriter", "MDSWriter", "TSVWriter", "XSVWriter", "merge_index"]
