"""Loaders over streaming datasets (imports torch)."""

from shardstream.loader.dataloader import StreamingDataLoader

__all__ = ["StreamingDataLoader"]
