"""Samples to shards: the MDS writer and the background uploader it publishes with."""

from shardstream.writer.mds_writer import MDSWriter

__all__ = ["MDSWriter"]
