"""Every exception shardstream raises, rooted at one base class.

Each error also derives from the builtin exception a caller would naturally catch, so
``except FileNotFoundError`` still works for a missing shard, and from the one
mosaicml-streaming raises in its place, so that code written against it still catches it::

    ShardstreamError(Exception)
    ├── MissingDependencyError(ImportError)      an optional extra is not installed
    ├── StreamingAliasError(ImportError)         the streaming alias cannot stand in (compat)
    ├── ConfigurationError(ValueError)           a bad argument (size limit, compression name, ...)
    │   └── NoMatchingFieldsError(RuntimeError)  a Petastorm reader's schema_fields match nothing
    ├── UnknownEncodingError(ValueError)         a column encoding name nobody registered
    ├── SampleEncodingError(TypeError)           a value does not fit its column's encoding
    │   ├── SampleTypeError(AttributeError)      a value of a type the encoding does not take
    │   ├── SampleValueError(ValueError)         the right type, but the wrong dtype, shape, ...
    │   ├── SampleRangeError(OverflowError)      a number outside its column's range
    │   ├── UnpicklableValueError(PicklingError) a pkl value that pickle refuses
    │   ├── ImageSaveError(OSError)              an image Pillow cannot save in the column's format
    │   ├── UnencodableTextError(UnicodeError)   a str holds a lone surrogate, which UTF-8 lacks
    │   └── SampleTooDeepError(RecursionError)   a value nests past Python's recursion limit
    ├── MissingColumnError(KeyError)             a sample lacks one of the writer's columns
    ├── UnknownColumnError(ValueError)           a sample holds keys that are not the columns
    ├── UnsafeEncodingError(ValueError)          a pickle column read without allow_unsafe_types
    │   └── UnsafePickleError                    a pickle names a class that is not loaded
    ├── IndexFormatError(ValueError)             index.json is malformed
    ├── EmptyStreamError(RuntimeError)           a stream's index holds no samples
    │   └── UnsafePathError                      a shard basename escapes the dataset root
    ├── ShardFormatError(ValueError)             a shard file is truncated or corrupt
    ├── ChecksumError(ValueError)                a shard's bytes do not match the index's hash
    ├── ShardTooLargeError(ValueError)           a shard would pass the 4 GiB offset limit
    ├── ShardNotFoundError(FileNotFoundError)    a shard named by the index is missing
    ├── DatasetExistsError(FileExistsError)      the writer's output folder is not empty
    ├── UnsupportedURLError(ValueError)          no storage backend for a URL scheme
    ├── UnsupportedTableError(ValueError)        a Delta table needs a reader feature not read here
    ├── TableVersionError(LookupError)           a Delta table version that is gone or not yet there
    ├── SampleKeyError(TypeError, ValueError)    a dataset indexed by neither ints nor a slice
    ├── TopologyError(ValueError)                ranks, nodes and workers that do not add up
    ├── CacheLimitError(ValueError)              cache_limit too small for what must be cached
    ├── CacheTimeoutError(TimeoutError)          waited too long for another process's lock
    ├── CacheFolderError(PermissionError)        a cache path not yours alone, or not a cache
    ├── CacheConflictError(FileExistsError)      a cache folder holds another remote's files
    ├── DiskFullError(OSError)                   no room left on a cache or output folder's disk
    ├── UploadError(OSError)                     a shard or index could not be uploaded
    └── StorageError(OSError)                    an object store refused or failed a request
        ├── CredentialsError                     the store rejected (or found no) credentials
        ├── ObjectNotFoundError(FileNotFoundError)  no object under a key
        ├── ObjectChangedError                   an object is no longer the version listed
        └── DownloadTimeoutError(TimeoutError)   a download's requests ran past their timeout
"""

from __future__ import annotations

import errno
import pickle

__all__ = [
    "CacheConflictError",
    "CacheFolderError",
    "CacheLimitError",
    "CacheTimeoutError",
    "ChecksumError",
    "ConfigurationError",
    "CredentialsError",
    "DatasetExistsError",
    "DiskFullError",
    "DownloadTimeoutError",
    "EmptyStreamError",
    "ImageSaveError",
    "IndexFormatError",
    "MissingColumnError",
    "MissingDependencyError",
    "NoMatchingFieldsError",
    "ObjectChangedError",
    "ObjectNotFoundError",
    "SampleEncodingError",
    "SampleKeyError",
    "SampleRangeError",
    "SampleTooDeepError",
    "SampleTypeError",
    "SampleValueError",
    "ShardFormatError",
    "ShardNotFoundError",
    "ShardTooLargeError",
    "ShardstreamError",
    "StorageError",
    "StreamingAliasError",
    "TableVersionError",
    "TopologyError",
    "UnencodableTextError",
    "UnknownColumnError",
    "UnknownEncodingError",
    "UnpicklableValueError",
    "UnsafeEncodingError",
    "UnsafePathError",
    "UnsafePickleError",
    "UnsupportedTableError",
    "UnsupportedURLError",
    "UploadError",
]


class ShardstreamError(Exception):
    """Base class of every error raised by shardstream."""


class MissingDependencyError(ShardstreamError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""


class StreamingAliasError(ShardstreamError, ImportError):
    """shardstream cannot stand in for mosaicml-streaming under its ``streaming`` names.

    The real package is imported already, or a name asked of the alias is one it lacks; the
    message says what to do.
    """


class ConfigurationError(ShardstreamError, ValueError):
    """An argument has a value shardstream cannot use; the message says which and why."""


class NoMatchingFieldsError(ConfigurationError, RuntimeError):
    """A Petastorm reader's ``schema_fields`` match no field of the dataset.

    A ``RuntimeError``, as Petastorm raises, and still a :class:`ConfigurationError`.
    """


class UnknownEncodingError(ShardstreamError, ValueError):
    """A column encoding name is not registered."""


class SampleEncodingError(ShardstreamError, TypeError):
    """A sample value does not match its column's encoding."""


class SampleTypeError(SampleEncodingError, AttributeError):
    """A value's type is not one its column's encoding takes (a ``str`` for an ``int`` column).

    Also an ``AttributeError``: what mosaicml-streaming's writer raises for it.
    """


class SampleValueError(SampleEncodingError, ValueError):
    """A value of a type the encoding takes, that still does not fit it.

    An array of another dtype or shape than the column's, an empty array, bytes that are not
    a file of the column's image format. Also a ``ValueError``, as in mosaicml-streaming.
    """


class SampleRangeError(SampleEncodingError, OverflowError):
    """A number outside the range its column's encoding stores (``300`` for ``uint8``).

    Also an ``OverflowError``, as in mosaicml-streaming.
    """


class UnpicklableValueError(SampleEncodingError, pickle.PicklingError):
    """A ``pkl`` column's value that ``pickle`` refuses (a lambda); a ``PicklingError`` too."""


class ImageSaveError(SampleEncodingError, OSError):
    """Pillow cannot save the image in its column's format (an ``RGBA`` image as ``jpeg``).

    Also the ``OSError`` Pillow raises, as mosaicml-streaming lets it.
    """


class UnencodableTextError(SampleEncodingError, UnicodeError):
    """A ``str`` value holds a lone surrogate (half of a UTF-16 pair), which UTF-8 cannot store."""


class SampleTooDeepError(SampleEncodingError, RecursionError):
    """A value (JSON or pickle) nests deeper than Python's recursion limit lets it be encoded."""


class MissingColumnError(ShardstreamError, KeyError):
    """A sample passed to a writer lacks one of the writer's columns."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0]) if self.args else ""


class UnknownColumnError(ShardstreamError, ValueError):
    """A sample passed to a writer holds keys that are not the writer's columns."""


class UnsafeEncodingError(ShardstreamError, ValueError):
    """A column uses an encoding that can run code on read (pickle) and the user did not opt in."""


class UnsafePickleError(UnsafeEncodingError):
    """A pickle (Petastorm's Unischema metadata) names a class that loading it would run.

    Only the classes a Petastorm schema is made of are loaded; the message names the refused one.
    """


class IndexFormatError(ShardstreamError, ValueError):
    """An index.json file is malformed."""


class UnsafePathError(IndexFormatError):
    """A shard basename is absolute or climbs out of the dataset root."""


class EmptyStreamError(ShardstreamError, RuntimeError):
    """A stream's index lists no shards, or shards without samples; the message names it.

    A ``RuntimeError``, as in mosaicml-streaming.
    """


class ShardFormatError(ShardstreamError, ValueError):
    """A shard file is truncated, corrupt or disagrees with its index entry."""


class ChecksumError(ShardstreamError, ValueError):
    """A shard's bytes do not match the digest recorded in the index."""


class ShardTooLargeError(ShardstreamError, ValueError):
    """A shard would exceed the 4 GiB limit of the format's 32-bit offsets."""


class ShardNotFoundError(ShardstreamError, FileNotFoundError):
    """A shard named by the index is not where the index says it is."""


class DatasetExistsError(ShardstreamError, FileExistsError):
    """The writer's output folder already holds files and ``exist_ok`` is False."""


class UnsupportedURLError(ShardstreamError, ValueError):
    """No storage backend handles this URL's scheme."""


class UnsupportedTableError(ShardstreamError, ValueError):
    """A Delta table uses a reader feature shardstream does not read; the message names it."""


class TableVersionError(ShardstreamError, LookupError):
    """A Delta table version is gone (vacuumed) or not there yet; the message names those left."""


class SampleKeyError(ShardstreamError, TypeError, ValueError):
    """A dataset was indexed by something else than an int, a slice or a sequence of ints.

    A ``TypeError``, and a ``ValueError`` as in mosaicml-streaming.
    """


class TopologyError(ShardstreamError, ValueError):
    """Nodes, ranks and workers do not add up; the message says where each value came from."""


class CacheLimitError(ShardstreamError, ValueError):
    """``cache_limit`` is too small for the shards that must be on disk at once."""


class CacheTimeoutError(ShardstreamError, TimeoutError):
    """Another process held a cache lock (a shard being downloaded) for too long."""


class CacheFolderError(ShardstreamError, PermissionError):
    """A cache folder, or a file or folder in it, is not this user's alone, or not a cache.

    Another user owns it, others may write to it, or it is a symbolic link (which whoever can
    write to a shared cache folder could plant there). Or a ``local=`` folder is not one the
    library created as a cache (:mod:`shardstream.cache.ownership`): it holds files but no
    marker, a dataset of its own, or overlaps the remote.
    """


class CacheConflictError(ShardstreamError, FileExistsError):
    """A cache folder (``local=``) already caches another remote's dataset."""


class DiskFullError(ShardstreamError, OSError):
    """A disk filled up: a cache folder's (fetching a shard) or a writer's output folder's."""


#: What a write to a full disk (or a full quota) fails with.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class UploadError(ShardstreamError, OSError):
    """A shard or index upload failed after every retry."""


class StorageError(ShardstreamError, OSError):
    """An object store refused or failed a request; the message names the URL."""


class CredentialsError(StorageError):
    """The store rejected the credentials or found none; the message says where they come from."""


class ObjectNotFoundError(StorageError, FileNotFoundError):
    """No object exists under the requested key."""


class ObjectChangedError(StorageError):
    """An object was rewritten since a version of it was listed or read: a tied read refused."""


class DownloadTimeoutError(StorageError, TimeoutError):
    """A download's request ran past its timeout on every attempt; the message names the URL."""
