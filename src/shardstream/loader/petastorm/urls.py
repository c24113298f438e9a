"""What a Petastorm reader's ``dataset_url_or_urls`` names: a folder, one file, or a list of files.

Petastorm's ``make_batch_reader`` takes the URL of a Parquet folder or of one file, or a list of
file URLs on one file system. Here the files become a stream over the folder they share, which
reads only them (``Stream(files=...)``): partition folders below it still give columns.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from shardstream.errors import ConfigurationError
from shardstream.storage import is_remote, local_path

__all__ = ["dataset_files"]


def dataset_files(url_or_urls: Any, *, many: bool) -> tuple[str, tuple[str, ...] | None]:
    """The root to stream and the files under it to read (``None``: every Parquet file).

    Args:
        url_or_urls: A folder or file URL (or path), or, with ``many``, a list of file URLs.
        many: Whether a list is accepted (``make_batch_reader``; Petastorm's ``make_reader``
            takes one URL).

    Raises:
        ConfigurationError: Not a URL, an empty list, or files on different file systems.

    Example:
        >>> dataset_files(["s3://b/d/x.parquet", "s3://b/d/y=1/z.parquet"], many=True)
        ('s3://b/d', ('x.parquet', 'y=1/z.parquet'))
    """
    if isinstance(url_or_urls, (list, tuple)):
        if not many:
            raise ConfigurationError(
                "make_reader takes one dataset URL, as Petastorm's; read a list of Parquet "
                "files with make_batch_reader"
            )
        return _common_root([_one(url) for url in url_or_urls])
    url = _one(url_or_urls)
    if not is_remote(url) and os.path.isfile(local_path(url)):
        return _common_root([url])
    return (url if is_remote(url) else os.path.abspath(local_path(url))), None


def _one(url: Any) -> str:
    if not isinstance(url, (str, os.PathLike)) or not os.fspath(url):
        raise ConfigurationError(f"a dataset URL must be a string, got {url!r}")
    return os.fspath(url).rstrip("/") or "/"


def _common_root(urls: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """The deepest folder holding every file, and each file's path under it."""
    if not urls:
        raise ConfigurationError("the list of Parquet file URLs is empty: name at least one file")
    kinds = {_file_system(url) for url in urls}
    if len(kinds) > 1:
        raise ConfigurationError(
            f"the Parquet file URLs are on {len(kinds)} file systems ({', '.join(sorted(kinds))}): "
            f"a reader reads files of one file system; make one reader per file system"
        )
    if not is_remote(urls[0]):
        paths = [os.path.abspath(local_path(url)) for url in urls]
        root = os.path.commonpath([os.path.dirname(path) for path in paths])
        return root, tuple(os.path.relpath(path, root).replace(os.sep, "/") for path in paths)
    parts = [url.split("/") for url in urls]
    common: list[str] = []
    for names in zip(*(p[:-1] for p in parts), strict=False):
        if len(set(names)) > 1:
            break
        common.append(names[0])
    root = "/".join(common)
    return root, tuple("/".join(p[len(common) :]) for p in parts)


def _file_system(url: str) -> str:
    """The scheme and bucket (or host) of ``url``: ``'local'`` for paths and ``file://``."""
    if not is_remote(url):
        return "local"
    split = urlsplit(url)
    return f"{split.scheme}://{split.netloc}" if split.netloc else f"{split.scheme}:"
