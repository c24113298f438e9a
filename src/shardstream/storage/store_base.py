"""The one boundary between shardstream and a store's SDK: a base class every backend extends.

In the way fsspec's ``AbstractFileSystem`` works, a backend implements a few primitives and the
base builds the whole :class:`~shardstream.storage.base.ObjectStore` contract on them, once:

- ``_read(key, start, end)``: the bytes ``start .. end - 1`` of an object (``end`` ``None``: to
  its end), ``_write(local_path, key)``, ``_head(key)``, ``_remove(key)``;
- ``_list_page(prefix, start_after, token)``: one page of a listing and the token of the next;
- ``_read_info(key)`` (optional): a whole object and the identity its own answer gave (size and
  version tag), so that bytes read before a listing can be matched with it;
- ``_read_range_info(key, start, end, etag)`` (optional): a byte range and the identity its
  answer gave (the object's size and tag); with ``etag``, only while the object's tag is
  still ``etag`` (a conditional request), so that ranges read one by one are of one version;
- ``_classify(exc)``: whether an SDK's exception means a missing object, refused credentials,
  a range past the end, or another failure of the store (or is no store error at all).

The base checks keys and byte ranges before any request (and a constructor's timeouts,
``_check_timeouts``), refuses short reads, turns the SDK's
exceptions into :class:`~shardstream.errors.ObjectNotFoundError`,
:class:`~shardstream.errors.CredentialsError` and :class:`~shardstream.errors.StorageError`
naming the full URL (chained to the SDK's exception unless that one holds a secret), follows a
listing's pages, and lists key ranges in parallel where the store can start a listing after a
key (:meth:`BaseStore.list_info`'s ``split_at``). Deadlines and retries stay with the caller
(:mod:`shardstream.storage.download`): they are a property of a call, not of a store.
"""

from __future__ import annotations

import builtins
import contextlib
import enum
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from shardstream.errors import (
    ConfigurationError,
    CredentialsError,
    ObjectChangedError,
    ObjectNotFoundError,
    ShardstreamError,
    StorageError,
    UnsupportedURLError,
)
from shardstream.storage.base import ObjectInfo
from shardstream.storage.download_options import DownloadOptions
from shardstream.storage.key_ranges import KeyRange, split_ranges, walk_range
from shardstream.storage.keys import check_key, check_range

__all__ = ["BaseStore", "Failure", "Kind", "PastTheEnd", "WritableStore", "check_timeouts"]

#: A bound on a listing's loop (a billion keys at S3's page size), never reached by a real one.
MAX_PAGES = 1_000_000
#: About how many keys a parallel listing gives one range: fewer than a page of S3's, so that
#: a range is one request, with room for keys the split points do not name.
KEYS_PER_RANGE = 900

_T = TypeVar("_T")

# Signatures and credentials of signed URLs (S3's presigned, Azure's shared access) and
# connection strings, should an SDK or a server ever put one in an error message.
_SIGNATURE = re.compile(
    r"(?i)\b(sig|signature|x-amz-signature|x-amz-credential|se|sv|st|accountkey"
    r"|sharedaccesssignature)=([^&;\s'\"]+)"
)


class Kind(enum.Enum):
    """What a failed request means, as a backend's ``_classify`` reads its SDK's exception."""

    NOT_FOUND = "not found"
    CREDENTIALS = "credentials"
    PAST_END = "past the end"
    OTHER = "other"


@dataclass(frozen=True)
class Failure:
    """A backend's reading of an exception: its kind, and what the SDK said (scrubbed later)."""

    kind: Kind
    detail: str


class BaseStore:
    """The :class:`~shardstream.storage.base.ObjectStore` contract built on a backend's primitives.

    Subclasses implement :meth:`url`, the primitives and :meth:`_classify`; they may override
    the hooks that shape messages (:meth:`_endpoint`, :meth:`_credentials_help`,
    :meth:`_not_found_hint`, :meth:`_secrets`). Constructors call ``super().__init__()``.
    """

    #: What the store holds, in messages ("object", "file", "blob").
    _noun = "object"
    #: Whether ``_list_page`` starts after a key on the server and lists in key order, so that
    #: key ranges can be listed in parallel (S3's ``StartAfter``).
    _lists_from_key = False
    #: Whether an empty range asks the store for the object's size (to refuse one past the end).
    _empty_range_asks = False
    #: Where requests go when the store names no ``endpoint_url``, for messages.
    _default_endpoint: str | None = None
    #: Where credentials come from, and what to set, said when they are refused.
    _credentials_text = "Check the store's credentials"
    #: Attributes holding clients made on first use, forgotten in a forked child.
    _clients: tuple[str, ...] = ()
    #: Whether ``_read_info`` is implemented: a read returns the identity of what it read.
    _identifies_reads = False
    #: Whether ``_read_range_info`` is implemented: a ranged read can be tied to a version tag.
    _ties_ranges = False

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        for name in self._clients:
            setattr(self, name, None)

    # --- the primitives -------------------------------------------------------------------------

    def url(self, key: str) -> str:
        """The full URL of ``key``, for messages and logs (never with credentials)."""
        raise NotImplementedError

    def _read(self, key: str, start: int, end: int | None) -> bytes:
        """Bytes ``start .. end - 1`` of the object (``end`` ``None``: to its end); may be short."""
        raise NotImplementedError

    def _write(self, local_path: str, key: str) -> None:
        """Publish the file at ``local_path`` under ``key``, atomically for readers."""
        raise NotImplementedError

    def _list_page(
        self, prefix: str, start_after: str | None, token: str | None
    ) -> tuple[dict[str, ObjectInfo], str | None]:
        """One page of the objects whose keys start with ``prefix``, and the next page's token.

        Keys are relative to the root; ``start_after`` (on the first page, ``token`` ``None``)
        asks for keys after it only. The last page's token is ``None``.
        """
        raise NotImplementedError

    def _head(self, key: str) -> ObjectInfo:
        """The size and version tag of the object under ``key``."""
        raise NotImplementedError

    def _read_info(self, key: str) -> tuple[bytes, ObjectInfo]:
        """The whole object, and its size and version tag as the same answer gave them.

        From the read's own answer (its headers, or the open file's status), never from a
        second request, which could see another version than the bytes.
        """
        raise NotImplementedError

    def _read_range_info(
        self, key: str, start: int, end: int, etag: str | None
    ) -> tuple[bytes, ObjectInfo | None]:
        """Bytes ``start .. end - 1`` (may be short); the object's size and tag, as answered.

        ``None`` for the identity when the answer gave no tag or no size.
        With ``etag``, raises :class:`~shardstream.errors.ObjectChangedError` (no message
        needed: the base words it) when the object's tag is another, from the same answer.
        """
        raise NotImplementedError

    def _classify(self, exc: Exception) -> Failure | None:
        """What ``exc`` means, or ``None`` when it is no failure of the store (raised as it is)."""
        raise NotImplementedError

    # --- hooks that shape messages --------------------------------------------------------------

    def _endpoint(self) -> str | None:
        """Where requests go, named in messages (``None``: nowhere worth naming).

        The store's ``endpoint_url``, else ``_default_endpoint``.
        """
        endpoint = getattr(self, "endpoint_url", None)
        return str(endpoint) if endpoint else self._default_endpoint

    def _credentials_help(self) -> str:
        """Where credentials come from, and what to set."""
        return self._credentials_text

    def _not_found_hint(self) -> str:
        """Said after "no such object" (what to check)."""
        return ""

    def _secrets(self) -> Sequence[str]:
        """Every secret this store holds, to be removed from messages."""
        return ()

    def _fast_reader(self) -> BaseStore | None:
        """Another store that serves this one's reads (``None``: the primitives serve them).

        A backend whose reads go through a faster client (obstore) returns that client's store
        of the same root: ``get_bytes``, ``get_range``, ``get_bytes_info`` and ``info`` go to
        it once this store has checked the key, and its errors, already shardstream's and
        naming the same URLs, pass as they are.
        """
        return None

    # --- the ObjectStore protocol ---------------------------------------------------------------

    def put_file(self, local_path: str, key: str) -> None:
        """Publish the file at ``local_path`` under ``key``, atomically for readers.

        Raises:
            FileNotFoundError: ``local_path`` does not exist (the caller's mistake, not ours).
            CredentialsError: The store refused the credentials, or none were found.
            StorageError: Any other failure of the request.
        """
        self._key(key)
        os.stat(local_path)
        with self._boundary("uploading to", key):
            self._write(local_path, key)

    def get_bytes(self, key: str) -> bytes:
        """The whole object under ``key``.

        Raises:
            ObjectNotFoundError: No object under ``key``.
            CredentialsError: The store refused the credentials, or none were found.
            StorageError: Any other failure of the request.
        """
        return self._ask(
            "reading", key, lambda: self._read(key, 0, None), lambda other: other.get_bytes(key)
        )

    @property
    def lists_in_ranges(self) -> bool:
        """Whether :meth:`list_info` lists key ranges in parallel when given ``split_at``."""
        return self._lists_from_key

    @property
    def identifies_reads(self) -> bool:
        """Whether :meth:`get_bytes_info` is available (else it raises ``UnsupportedURLError``)."""
        return self._identifies_reads

    def get_bytes_info(self, key: str) -> tuple[bytes, ObjectInfo]:
        """The whole object under ``key``, and the size and version tag of the bytes returned.

        One request: the identity comes from the read's own answer, so it is the identity of
        these bytes even when the object is replaced meanwhile, and it can be compared with a
        listing's (``ObjectInfo`` equality).

        Raises:
            UnsupportedURLError: The store cannot tell which version a read returned.
            ObjectNotFoundError: No object under ``key``.
            CredentialsError: The store refused the credentials, or none were found.
            StorageError: Any other failure of the request, or a body of another size than
                its answer gave (a transfer error).
        """
        self._key(key)
        if not self._identifies_reads:
            raise UnsupportedURLError(
                f"reading {self.url(key)}: {type(self).__name__} cannot tell which version of "
                "an object a read returned; use get_bytes and info"
            )
        if (through := self._reads_through(key)) is not None:
            return through.get_bytes_info(key)
        with self._boundary("reading", key):
            data, info = self._read_info(key)
        if len(data) != info.size:
            raise StorageError(
                f"reading {self.url(key)} failed: a transfer error: the answer gave "
                f"{info.size} bytes but its body was {len(data)} bytes"
            )
        return data, info

    @property
    def ties_ranges(self) -> bool:
        """Whether :meth:`get_range` takes ``if_match`` (else it raises ``UnsupportedURLError``)."""
        try:
            reader = self._fast_reader()
        except Exception:  # noqa: BLE001 - a read reports it; here it only means "not through it"
            reader = None
        return self._ties_ranges if reader is None else reader.ties_ranges

    def get_range(self, key: str, start: int, end: int, *, if_match: str | None = None) -> bytes:
        """Bytes ``start .. end - 1`` of the object under ``key``, in one ranged request.

        Args:
            key: The object's key.
            start: The first byte.
            end: One past the last byte.
            if_match: A version tag (a listing's ``ObjectInfo.etag``, or the one
                :meth:`get_range_info` answered): the bytes only if the object is still that
                version, so that ranges read one by one never mix two versions of an object
                rewritten in between.

        Raises:
            ConfigurationError: The range is negative or reversed.
            UnsupportedURLError: ``if_match`` given to a store that cannot tie a range to a
                version (:attr:`ties_ranges`).
            ObjectChangedError: The object is no longer the version ``if_match`` names.
            ObjectNotFoundError: No object under ``key``.
            CredentialsError: The store refused the credentials, or none were found.
            StorageError: The range runs past the end of the object, or the request failed.
        """
        return self._get_tagged(key, start, end, if_match, tied=if_match is not None)[0]

    def get_range_info(self, key: str, start: int, end: int) -> tuple[bytes, ObjectInfo | None]:
        """:meth:`get_range`, and the object's size and version tag as its answer gave them.

        The version these bytes are of (``None``: the answer named none): later ranges given
        its tag as ``if_match`` are of the same. Raises as :meth:`get_range` with
        ``if_match`` (``UnsupportedURLError`` unless :attr:`ties_ranges`).
        """
        return self._get_tagged(key, start, end, None)

    def _get_tagged(
        self, key: str, start: int, end: int, if_match: str | None, *, tied: bool = True
    ) -> tuple[bytes, ObjectInfo | None]:
        """A range (tied: by ``_read_range_info``, with its identity), checked at the boundary."""
        self._key(key)
        if (through := self._reads_through(key)) is not None:
            return through._get_tagged(key, start, end, if_match, tied=tied)
        check_range(start, end, self.url(key))
        if tied and not self.ties_ranges:
            raise UnsupportedURLError(
                f"reading {self.url(key)}: {type(self).__name__} cannot tie a byte range to a "
                "version of the object; read it without if_match, or whole"
            )
        if start == end:
            if self._empty_range_asks and end > (size := self.info(key).size):
                raise self._past_the_end(key, start, end, size)
            return b"", None
        try:
            with self._boundary("reading", key):
                if tied:
                    data, answered = self._read_range_info(key, start, end, if_match)
                else:
                    data, answered = self._read(key, start, end), None
        except ObjectChangedError:
            raise ObjectChangedError(
                f"reading bytes {start}-{end - 1} of {self.url(key)}: the {self._noun} was "
                f"rewritten since version {if_match!r} of it was read or listed (the store "
                "holds another); read it again"
            ) from None
        except PastTheEnd:
            raise self._past_the_end(key, start, end, self.info(key).size) from None
        if len(data) != end - start:
            raise self._past_the_end(key, start, end, start + len(data))
        return data, answered

    def info(self, key: str) -> ObjectInfo:
        """The size and version tag of the object under ``key``, from one metadata request.

        Raises:
            ObjectNotFoundError: No object under ``key`` (a "folder" is not an object).
            CredentialsError: The store refused the credentials, or none were found.
            StorageError: Any other failure of the request.
        """
        return self._ask("checking", key, lambda: self._head(key), lambda other: other.info(key))

    def exists(self, key: str) -> bool:
        """Whether an object exists under ``key`` (a prefix of other keys is not one).

        Raises:
            CredentialsError: The store refused the credentials, or none were found.
            StorageError: Any other failure of the request.
        """
        try:
            self.info(key)
        except ObjectNotFoundError:
            return False
        return True

    def list(self, prefix: str = "") -> list[str]:
        """The keys (relative to the store's root) that start with ``prefix``, sorted.

        Raises:
            CredentialsError: The store refused the credentials, or none were found.
            StorageError: Any other failure of the request.
        """
        return sorted(self.list_info(prefix))

    def list_info(
        self, prefix: str = "", *, split_at: Sequence[str] = (), in_flight: int | None = None
    ) -> dict[str, ObjectInfo]:
        """:meth:`list`, with each object's size and version tag, from the same listing; sorted.

        Args:
            prefix: The keys' common start.
            split_at: Keys that cut the key space into ranges (:meth:`key_ranges`, for
                example at a cached index's shard names) listed at once, in threads. Where the
                store cannot start a listing after a key, or too few keys are given, the
                listing is one serial walk; the result is the same either way.
            in_flight: Ranges listed at once (default: ``DownloadOptions.list_ranges``).

        Raises:
            CredentialsError: The store refused the credentials, or none were found.
            StorageError: Any other failure of the request.
        """
        ranges = self.key_ranges(prefix, split_at)
        if len(ranges) == 1:
            return dict(sorted(self.list_range(prefix, ranges[0]).items()))
        threads = min(len(ranges), max(1, in_flight or DownloadOptions.list_ranges))
        with ThreadPoolExecutor(threads, "shardstream-list") as pool:
            parts = list(pool.map(lambda r: self.list_range(prefix, r), ranges))
        merged: dict[str, ObjectInfo] = {}
        for part in parts:  # ranges in key order, each sorted: the merge is sorted too
            merged.update(sorted(part.items()))
        return merged

    def key_ranges(self, prefix: str, split_at: Sequence[str]) -> builtins.list[KeyRange]:
        """The ranges :meth:`list_info` lists ``prefix`` in, in key order: together, every key once.

        Cut at some of ``split_at``, about ``KEYS_PER_RANGE`` of them a range (a page of S3's).
        One range, the whole key space, where the store cannot list from a key, or where each
        range would hold less than about a page.
        """
        if not self._lists_from_key or not split_at:
            return [KeyRange()]
        # Only plain keys: a file-backed server (SeaweedFS's filer) normalises "//" or "." in a
        # start key and may answer with other names; any subset of keys splits as well.
        keys = [key for key in split_at if key.startswith(prefix) and _plain(key)]
        return split_ranges(keys, KEYS_PER_RANGE)

    def list_page(
        self, prefix: str, start_after: str | None, token: str | None
    ) -> tuple[dict[str, ObjectInfo], str | None]:
        """One page of :meth:`_list_page`, at the boundary (a store may list through this one)."""
        if prefix:
            self._key(prefix)
        with self._boundary("listing", prefix):
            return self._list_page(prefix, start_after, token)

    def list_range(self, prefix: str, key_range: KeyRange) -> dict[str, ObjectInfo]:
        """The objects under ``prefix`` in ``key_range`` (one of :meth:`key_ranges`), page by page.

        Raises:
            CredentialsError: The store refused the credentials, or none were found.
            StorageError: Any other failure of the request.
        """
        if key_range.after is not None and not self._lists_from_key:
            raise UnsupportedURLError(
                f"listing {self.url(prefix)}: {type(self).__name__} cannot start a listing "
                "after a key; list its one range, KeyRange()"
            )

        def page(
            start_after: str | None, token: str | None
        ) -> tuple[dict[str, ObjectInfo], str | None]:
            return self._list_page(prefix, start_after, token)

        with self._boundary("listing", prefix):
            return walk_range(page, key_range, max_pages=MAX_PAGES, what=self.url(prefix))

    # --- internals ------------------------------------------------------------------------------

    def _key(self, key: str) -> str:
        """``key`` when it stays under the root (:func:`~shardstream.storage.keys.check_key`)."""
        return check_key(key, self.url(""))

    def _ask(
        self, action: str, key: str, primitive: Callable[[], _T], through: Callable[[BaseStore], _T]
    ) -> _T:
        """``primitive()`` at the boundary, or ``through(reader)`` where a fast reader serves."""
        self._key(key)
        if (reader := self._reads_through(key)) is not None:
            return through(reader)
        with self._boundary(action, key):
            return primitive()

    def _reads_through(self, key: str) -> BaseStore | None:
        """``_fast_reader()``, its settling failures translated as a read's would be."""
        try:  # no boundary entered on the way of every read: only when settling failed
            return self._fast_reader()
        except Exception:
            with self._boundary("reading", key):
                raise

    def _lazy(self, name: str, create: Callable[[], Any]) -> Any:
        """The client kept in attribute ``name``, created on first use (no I/O in ``__init__``).

        A forked process (a DataLoader worker) makes its own: event loops and pooled
        connections do not survive a fork.
        """
        if self._pid != os.getpid():
            self._lock = threading.Lock()  # a lock copied mid-use by fork would never open
            for attribute in self._clients:
                setattr(self, attribute, None)
            self._pid = os.getpid()
        with self._lock:
            client = getattr(self, name)
            if client is None:
                client = create()
                setattr(self, name, client)
            return client

    def _check_timeouts(self, **seconds: float) -> None:
        """Refuse a timeout (given by its parameter's name) that is not a positive number."""
        check_timeouts(f"{type(self).__name__}({self.url('')!r})", **seconds)

    def _past_the_end(self, key: str, start: int, end: int, size: int) -> StorageError:
        return StorageError(
            f"reading {self.url(key)}: byte range [{start}, {end}) runs past the end of the "
            f"{self._noun} ({size} bytes)"
        )

    @contextlib.contextmanager
    def _boundary(self, action: str, key: str) -> Iterator[None]:
        """Turn the SDK's errors into shardstream's, naming the URL and holding no secret."""
        try:
            yield
        except (ShardstreamError, PastTheEnd):
            raise
        except Exception as exc:
            failure = self._classify(exc)
            if failure is None:
                raise
            if failure.kind is Kind.PAST_END:
                raise PastTheEnd from None
            error = self._error(failure, f"{action} {self.url(key)}")
            # A traceback prints the chained exception too: keep it out when it holds a secret.
            raise error from (None if self._holds_secret(exc) else exc)

    def _error(self, failure: Failure, where: str) -> StorageError:
        detail = self._scrub(failure.detail)
        endpoint = self._endpoint()
        at = f" at {endpoint}" if endpoint else ""
        if failure.kind is Kind.NOT_FOUND:
            return ObjectNotFoundError(
                f"{where} failed: no such {self._noun} ({detail}){self._not_found_hint()}"
            )
        if failure.kind is Kind.CREDENTIALS:
            return CredentialsError(
                f"{where} failed{at}: the credentials were refused, or none were found "
                f"({detail}). {self._credentials_help()}."
            )
        return StorageError(f"{where} failed{at}: {detail}")

    def _holds_secret(self, exc: BaseException) -> bool:
        """Whether ``exc`` or an exception it was raised from mentions a secret."""
        seen: BaseException | None = exc
        visited: set[int] = set()
        while seen is not None and id(seen) not in visited:
            visited.add(id(seen))
            text = f"{seen!r} {seen}"
            if self._scrub(text) != text:
                return True
            seen = seen.__cause__ or seen.__context__
        return False

    def _scrub(self, text: str) -> str:
        """``text`` without this store's secrets or anything that looks like a signature."""
        secrets: set[str] = set()
        for secret in self._secrets():
            # The secret, as a repr() would escape it, and each long line of a multi-line one
            # (a PEM private key).
            secrets.update((secret, secret.encode("unicode_escape").decode("ascii")))
            secrets.update(line for line in secret.splitlines() if len(line) >= 16)
        for secret in sorted(filter(None, secrets), key=len, reverse=True):
            text = text.replace(secret, "***")
        return _SIGNATURE.sub(lambda match: f"{match.group(1)}=***", text)


class WritableStore(BaseStore):
    """A store a writer may also delete from (every backend but read-only HTTP)."""

    def _remove(self, key: str) -> None:
        """Delete the object under ``key`` (a missing one may raise or not)."""
        raise NotImplementedError

    def delete(self, key: str) -> None:
        """Delete the object under ``key`` (a missing object is already gone).

        Raises:
            CredentialsError: The store refused the credentials, or none were found.
            StorageError: Any other failure of the request.
        """
        self._key(key)
        with contextlib.suppress(ObjectNotFoundError), self._boundary("deleting", key):
            self._remove(key)


def check_timeouts(owner: str, **seconds: float) -> None:
    """Refuse any of ``seconds`` (timeouts by their parameters' names) that is not positive.

    Raises:
        ConfigurationError: Naming ``owner`` (what was being made) and every timeout given.
    """
    if not all(value > 0 for value in seconds.values()):  # NaN too: it compares false
        given = " and ".join(f"{name}={value}" for name, value in seconds.items())
        raise ConfigurationError(f"{owner}: {given}: timeouts must be positive numbers of seconds")


def _plain(key: str) -> bool:
    """Whether ``key``'s ``/``-separated parts are all names (none empty, ``.`` or ``..``)."""
    if "/" not in key:  # a shard's name, mostly: one part
        return key not in ("", ".", "..")
    return all(part not in ("", ".", "..") for part in key.split("/"))


class PastTheEnd(Exception):
    """A range ran past the object's end (a 416, or a primitive saw it): the size is asked next."""
