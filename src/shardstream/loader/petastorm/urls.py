"""What a Petastorm reader's ``dataset_url_or_urls`` names: a folder, one file, or a list of files.

Petastorm's readers take the URL of a Parquet folder or of one file, or a list of file URLs on
one file system. Here the files become a stream over the folder they share, above any
partition folders (``key=value``: where a Petastorm dataset keeps its ``_common_metadata``),
which reads only them (``Stream(files=...)``): the partition folders still give columns.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from shardstream.errors import ConfigurationError
from shardstream.storage import is_remote, local_path

__all__ = ["dataset_files"]


_PARTITION = re.compile(r"[^=/]+=[^/]*")


def dataset_files(url_or_urls: Any) -> tuple[str, tuple[str, ...] | None]:
    """The root to stream and the files under it to read (``None``: every Parquet file).

    A file named twice is read twice, as in Petastorm.

    Args:
        url_or_urls: A folder or file URL (or path), or a list of file URLs (or paths).

    Raises:
        ConfigurationError: Not a URL, an empty list, or files on different file systems.

    Example:
        >>> dataset_files(["s3://b/d/k=1/x.parquet", "s3://b/d/k=2/y.parquet"])
        ('s3://b/d', ('k=1/x.parquet', 'k=2/y.parquet'))
    """
    if isinstance(url_or_urls, (list, tuple)):
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
    local = not is_remote(urls[0])
    if local:
        parts = [os.path.abspath(local_path(url)).split(os.sep) for url in urls]
    else:
        parts = [url.split("/") for url in urls]
    common: list[str] = []
    for names in zip(*(p[:-1] for p in parts), strict=False):
        if len(set(names)) > 1:
            break
        common.append(names[0])
    while len(common) > 1 and _PARTITION.fullmatch(common[-1]):
        common.pop()  # the dataset's root is above its partition folders
    root = (os.sep.join(common) or os.sep) if local else "/".join(common)
    return root, tuple("/".join(p[len(common) :]) for p in parts)


def _file_system(url: str) -> str:
    """The scheme and bucket (or host) of ``url``: ``'local'`` for paths and ``file://``."""
    if not is_remote(url):
        return "local"
    split = urlsplit(url)
    return f"{split.scheme}://{split.netloc}" if split.netloc else f"{split.scheme}:"
