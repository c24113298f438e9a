"""shardstream: Spark and object stores to deep-learning jobs, through MDS shards.

The public names live here; everything else is an implementation detail. The torch-facing
classes (``StreamingDataset``, ``StreamingDataLoader``) and the Spark entry points
(``dataframe_to_mds``, ``make_spark_converter``) load on first use, so that
``import shardstream`` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from shardstream._version import __version__
from shardstream.compat import install_streaming_alias
from shardstream.dataset import LocalDataset, Stream, StreamRegistry, streams_registry
from shardstream.format.encodings import Encoding, get_encoding, register_encoding
from shardstream.pipeline.policy import ReadPolicy
from shardstream.writer import CSVWriter, JSONWriter, MDSWriter, TSVWriter, XSVWriter, merge_index

if TYPE_CHECKING:
    from shardstream.converters import dataframe_to_mds
    from shardstream.dataset.streaming import StreamingDataset
    from shardstream.loader import StreamingDataLoader, make_spark_converter

__all__ = [
    "CSVWriter",
    "Encoding",
    "JSONWriter",
    "LocalDataset",
    "MDSWriter",
    "ReadPolicy",
    "Stream",
    "StreamRegistry",
    "StreamingDataLoader",
    "StreamingDataset",
    "TSVWriter",
    "XSVWriter",
    "__version__",
    "dataframe_to_mds",
    "get_encoding",
    "install_streaming_alias",
    "make_spark_converter",
    "merge_index",
    "register_encoding",
    "streams_registry",
]

# Names whose modules import torch: loaded on first access.
_LAZY = {
    "StreamingDataset": "shardstream.dataset.streaming",
    "StreamingDataLoader": "shardstream.loader",
    "dataframe_to_mds": "shardstream.converters",
    "make_spark_converter": "shardstream.loader",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'shardstream' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    value.__module__ = __name__
    globals()[name] = value
    return value


# Show public classes as shardstream.X in reprs and docs, not by the module that defines them.
for _name in (
    *("CSVWriter", "Encoding", "JSONWriter", "LocalDataset", "MDSWriter", "Stream"),
    *("StreamRegistry", "TSVWriter", "XSVWriter"),
):
    globals()[_name].__module__ = __name__
del _name
