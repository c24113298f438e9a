"""shardstream: Spark and object stores to deep-learning jobs, through MDS shards.

The public names live here; everything else is an implementation detail.
"""

from shardstream._version import __version__
from shardstream.dataset import LocalDataset
from shardstream.format.encodings import Encoding, get_encoding, register_encoding
from shardstream.writer import MDSWriter, merge_index

__all__ = [
    "Encoding",
    "LocalDataset",
    "MDSWriter",
    "__version__",
    "get_encoding",
    "merge_index",
    "register_encoding",
]

# Show public classes as shardstream.X in reprs and docs, not by the module that defines them.
for _name in ("Encoding", "LocalDataset", "MDSWriter"):
    globals()[_name].__module__ = __name__
del _name
