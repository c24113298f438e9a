"""Column encodings of the MDS format and the registry users extend.

Importing this package registers every built-in encoding.
"""

from shardstream.format.encodings import images, ndarray, pickled, scalars
from shardstream.format.encodings.base import (
    Buffer,
    Encoding,
    EncodingFactory,
    encoding_names,
    get_encoding,
    register_encoding,
)

__all__ = [
    "Buffer",
    "Encoding",
    "EncodingFactory",
    "encoding_names",
    "get_encoding",
    "images",
    "ndarray",
    "pickled",
    "register_encoding",
    "scalars",
]
