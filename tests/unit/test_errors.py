from __future__ import annotations

import inspect
import json
import pickle

import pytest

from shardstream import _optional, errors
from shardstream.errors import (
    CacheConflictError,
    CacheFolderError,
    CacheLimitError,
    CacheTimeoutError,
    ChecksumError,
    ConfigurationError,
    CredentialsError,
    DatasetExistsError,
    DiskFullError,
    DownloadTimeoutError,
    EmptyStreamError,
    ImageSaveError,
    IndexFormatError,
    MissingColumnError,
    MissingDependencyError,
    NoMatchingFieldsError,
    ObjectChangedError,
    ObjectNotFoundError,
    SampleEncodingError,
    SampleKeyError,
    SampleRangeError,
    SampleTooDeepError,
    SampleTypeError,
    SampleValueError,
    ShardFormatError,
    ShardNotFoundError,
    ShardstreamError,
    ShardTooLargeError,
    StorageError,
    StreamingAliasError,
    TableVersionError,
    TopologyError,
    UnencodableTextError,
    UnknownColumnError,
    UnknownEncodingError,
    UnpicklableValueError,
    UnsafeEncodingError,
    UnsafePathError,
    UnsafePickleError,
    UnsupportedTableError,
    UnsupportedURLError,
    UploadError,
)

# The builtin each error must also be, so that callers can catch the natural exception (and
# the one mosaicml-streaming raises in its place: tests/interop checks those against it).
HIERARCHY = [
    (MissingDependencyError, ImportError),
    (StreamingAliasError, ImportError),
    (ConfigurationError, ValueError),
    (NoMatchingFieldsError, ConfigurationError),
    (NoMatchingFieldsError, RuntimeError),
    (UnknownEncodingError, ValueError),
    (SampleEncodingError, TypeError),
    (SampleTypeError, SampleEncodingError),
    (SampleTypeError, AttributeError),
    (SampleValueError, SampleEncodingError),
    (SampleValueError, ValueError),
    (SampleRangeError, SampleEncodingError),
    (SampleRangeError, OverflowError),
    (UnpicklableValueError, SampleEncodingError),
    (UnpicklableValueError, pickle.PicklingError),
    (ImageSaveError, SampleEncodingError),
    (ImageSaveError, OSError),
    (UnencodableTextError, SampleEncodingError),
    (UnencodableTextError, UnicodeError),
    (SampleTooDeepError, SampleEncodingError),
    (SampleTooDeepError, RecursionError),
    (MissingColumnError, KeyError),
    (UnknownColumnError, ValueError),
    (UnsafeEncodingError, ValueError),
    (UnsafePickleError, UnsafeEncodingError),
    (IndexFormatError, ValueError),
    (UnsafePathError, IndexFormatError),
    (EmptyStreamError, RuntimeError),
    (ShardFormatError, ValueError),
    (ChecksumError, ValueError),
    (ShardTooLargeError, ValueError),
    (ShardNotFoundError, FileNotFoundError),
    (DatasetExistsError, FileExistsError),
    (UnsupportedURLError, ValueError),
    (UnsupportedTableError, ValueError),
    (TableVersionError, LookupError),
    (SampleKeyError, TypeError),
    (SampleKeyError, ValueError),
    (UploadError, OSError),
    (TopologyError, ValueError),
    (StorageError, OSError),
    (CredentialsError, StorageError),
    (ObjectNotFoundError, StorageError),
    (ObjectNotFoundError, FileNotFoundError),
    (ObjectChangedError, StorageError),
    (DownloadTimeoutError, StorageError),
    (DownloadTimeoutError, TimeoutError),
    (CacheLimitError, ValueError),
    (CacheTimeoutError, TimeoutError),
    (CacheFolderError, PermissionError),
    (CacheConflictError, FileExistsError),
    (DiskFullError, OSError),
]


@pytest.mark.parametrize(("error", "builtin"), HIERARCHY)
def test_error_derives_from_base_and_builtin(error: type[Exception], builtin: type[Exception]):
    assert issubclass(error, ShardstreamError)
    assert issubclass(error, builtin)
    with pytest.raises(builtin, match="boom"):
        raise error("boom")


def test_every_error_class_is_exported_and_covered():
    defined = {
        name
        for name, value in inspect.getmembers(errors, inspect.isclass)
        if issubclass(value, ShardstreamError)
    }
    assert set(errors.__all__) == defined
    assert {error.__name__ for error, _ in HIERARCHY} | {"ShardstreamError"} == defined


def test_shard_not_found_is_caught_as_file_not_found():
    caught = None
    try:
        raise ShardNotFoundError("shard.00000.mds is missing")
    except FileNotFoundError as exc:
        caught = exc
    assert isinstance(caught, ShardNotFoundError)


def test_missing_column_error_prints_its_message_not_a_repr():
    message = "sample has no column 'label'"
    assert str(MissingColumnError(message)) == message
    assert str(KeyError(message)) != message  # the plain KeyError would quote it
    assert str(MissingColumnError()) == ""


def test_require_returns_the_module():
    assert _optional.require("json", extra="core", purpose="Parsing") is json


def test_require_names_the_extra_when_the_module_is_missing():
    with pytest.raises(MissingDependencyError, match=r"shardstream\[images\]") as info:
        _optional.require("shardstream_no_such_module", extra="images", purpose="Image columns")
    message = str(info.value)
    assert "shardstream_no_such_module" in message
    assert "Image columns" in message
    assert isinstance(info.value, ImportError)
    assert isinstance(info.value.__cause__, ImportError)
