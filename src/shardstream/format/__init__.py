"""The MDS format: column encodings, compression, hashes, index.json and the shard layout.

Pure: this package turns values into bytes and back, and never opens a file itself.
"""

from shardstream.format.compression import COMPRESSIONS, Compression, get_compression
from shardstream.format.encodings import Encoding, encoding_names, get_encoding, register_encoding
from shardstream.format.hashing import HASH_ALGORITHMS, hash_bytes
from shardstream.format.index import FileInfo, ShardEntry, dump_index, parse_index
from shardstream.format.mds import MDSSchema, MDSShardView

__all__ = [
    "COMPRESSIONS",
    "HASH_ALGORITHMS",
    "Compression",
    "Encoding",
    "FileInfo",
    "MDSSchema",
    "MDSShardView",
    "ShardEntry",
    "dump_index",
    "encoding_names",
    "get_compression",
    "get_encoding",
    "hash_bytes",
    "parse_index",
    "register_encoding",
]
