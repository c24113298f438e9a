"""How a write replaces the dataset on a store: all of it, or none of it.

The rule, stated here once and followed by :class:`~shardstream.MDSWriter` and
``dataframe_to_mds``:

1. A write whose files go to a store (any ``out`` with a remote) names its shards with a token
   of its own, ``shard.<token>.00000.mds``, so it never overwrites a file another write made,
   and an ``index.json`` a reader holds never names a file whose bytes changed.
2. It refuses a destination that holds objects unless ``exist_ok=True``
   (:func:`check_destination`), as a non-empty local folder is refused.
3. It publishes ``index.json`` last, naming only its own shards, once all of them are in place.
   Until then readers see the old dataset whole; a write that dies never publishes an index.
4. Once its index is published, and only then, it deletes what earlier writes left
   (:func:`remove_unnamed`): the shards the old index named, and those of writes that died,
   with (a plain folder as the store) the temporary copies a killed writer was making of its
   files. Only files named as shardstream or mosaicml-streaming name shards (and the
   temporaries of those and of ``index.json``) are deleted; other files stay.

A local folder (no remote) keeps the reference's names, ``shard.00000.mds``: ``exist_ok=True``
empties it first, so a rewrite that dies leaves no ``index.json`` and readers a clear error.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Collection

from shardstream.errors import DatasetExistsError
from shardstream.format.compression import COMPRESSIONS
from shardstream.format.index import INDEX_BASENAME
from shardstream.storage import LocalStore, ObjectStore
from shardstream.storage.base import Remover

__all__ = [
    "SPARK_FOLDER",
    "check_destination",
    "is_ours",
    "new_write_token",
    "remove_unnamed",
    "shard_basename",
]

logger = logging.getLogger(__name__)

_WRITE_ID = r"[0-9a-f]{12}"
_EXTENSIONS = "|".join(map(re.escape, COMPRESSIONS))
#: A shard as shardstream (``shard.<token>.00000.mds``) or the reference names it, compressed
#: (``.zstd``, ...) or not; the text formats' shards with their ``.meta`` files too. Writers
#: make ASCII names only: ``re.ASCII``, or ``\d`` would take the digits of any script.
_SHARD = re.compile(
    rf"shard\.(?:{_WRITE_ID}\.)?\d{{5,}}\.(?:mds|(?:json|csv|tsv|xsv)(?:\.meta)?)"
    rf"(?:\.(?:{_EXTENSIONS}))?",
    re.ASCII,
)
#: The sub-folder a Spark task writes its partition to: ``part-<partition>-<attempt>-<token>``
#: (without the token from versions that wrote none).
SPARK_FOLDER = re.compile(rf"part-(\d+)-(\d+)(?:-({_WRITE_ID}))?", re.ASCII)


def new_write_token() -> str:
    """A token no other write uses, for the names of one write's files."""
    return uuid.uuid4().hex[:12]


def shard_basename(number: int, token: str | None, shard_format: str = "mds") -> str:
    """The name of a write's shard ``number``: the reference's, with the write's token if any."""
    if token:
        return f"shard.{token}.{number:05}.{shard_format}"
    return f"shard.{number:05}.{shard_format}"


def is_ours(key: str) -> bool:
    """Whether the key ``key`` below a dataset root names a file a writer made there.

    A shard at the root, or a shard or index in a Spark task's sub-folder. The root's own
    ``index.json`` and anything else (the user's files, ``merge_index`` partitions) are not.
    """
    folder, _, name = key.rpartition("/")
    if not folder:
        return _SHARD.fullmatch(name) is not None
    return SPARK_FOLDER.fullmatch(folder) is not None and (
        name == INDEX_BASENAME or _SHARD.fullmatch(name) is not None
    )


def _is_our_temporary(key: str) -> bool:
    """Whether ``key`` is the temporary sibling of a file a writer makes, index included."""
    folder, _, name = key.rpartition("/")
    final = name[1 : name.rindex(".tmp-")]  # temporary_sibling's ``.{name}.tmp-{token}``
    if not folder:
        return final == INDEX_BASENAME or is_ours(final)
    return is_ours(f"{folder}/{final}")


def check_destination(
    store: ObjectStore,
    *,
    exist_ok: bool,
    hint: str = "exist_ok=True",
    list_keys: Callable[[], list[str]] | None = None,
) -> None:
    """Refuse a destination that holds objects, unless ``exist_ok``.

    Nothing is deleted here: an old dataset stays readable until the new index replaces it.
    ``list_keys`` lists the store (default ``store.list``; a writer passes it retried).

    Raises:
        DatasetExistsError: The destination holds objects and ``exist_ok`` is False.
    """
    if exist_ok:
        return
    existing = (list_keys or store.list)()
    if existing:
        what = (
            "a dataset (an index.json)"
            if INDEX_BASENAME in existing
            else "no index.json: files of a write that did not finish, or someone else's"
        )
        raise DatasetExistsError(
            f"{store.url('')} is not empty: it holds {len(existing)} objects ({what}, e.g. "
            f"{existing[0]}); pass {hint} to replace the dataset there (the old one stays "
            "readable until the new index.json is published), or choose an empty prefix"
        )


def remove_unnamed(store: ObjectStore, keep: Callable[[str], bool] | Collection[str]) -> None:
    """Delete the files of earlier writes at ``store``: call only after publishing the index.

    Deletes every key :func:`is_ours` accepts that ``keep`` does not hold (or, a callable,
    accept). A job still reading the old dataset then finds its shards gone, a clear error,
    never a shard of the new one under an old name. A failure to delete is logged, not raised
    (the new dataset is whole); a store that cannot delete gets a warning listing the files.
    """
    kept = keep if callable(keep) else set(keep).__contains__
    try:
        stale = [key for key in store.list() if is_ours(key) and not kept(key)]
        if isinstance(store, LocalStore):  # copies a killed writer left, which no listing shows
            stale += [key for key in store.list_temporaries() if _is_our_temporary(key)]
        if stale and isinstance(store, Remover):
            logger.info("deleting %d files of earlier writes from %s", len(stale), store.url(""))
            for key in stale:
                store.delete(key)
            return
    except OSError as exc:  # the new dataset is published and whole: only garbage is left
        logger.warning(
            "could not delete the files of earlier writes from %s (%s); the next write there "
            "with exist_ok=True deletes them",
            store.url(""),
            exc,
        )
        return
    if stale:
        logger.warning(
            "%s holds %d files of earlier writes that its index does not name; delete them at "
            "will: %s",
            store.url(""),
            len(stale),
            ", ".join(stale),
        )
