"""A transport over obstore (the Rust ``object_store`` crate): S3, GCS, Azure Blob and HTTP.

A store (:class:`~shardstream.storage.store_base.WritableStore`) whose primitives (ranged
read, atomic write, a listing page, head, remove) go through one client whose requests cost a
fraction of botocore's CPU (``benchmarks/client_bench.py``); the base checks keys and ranges
and translates obstore's errors, as for every backend. One class serves every kind of store;
:meth:`ObstoreClient.of_s3_store`, :meth:`~ObstoreClient.of_azure_store`,
:meth:`~ObstoreClient.gcs` and :meth:`~ObstoreClient.http` settle each kind's endpoint and
credentials from the same arguments and variables as the backends of the same kind
(:mod:`shardstream.storage.s3`, ``gcs``, ``azure``), and name them in credential errors.

obstore's own retries are off: shardstream retries in one place (downloads in
:mod:`shardstream.storage.download`, uploads in the writer), so that ``retry=N`` means exactly
N retries. The store is made on first use (no I/O, no import of obstore, in a constructor), and
again in a forked child, whose parent's connections it must not share.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from shardstream import config
from shardstream.errors import (
    ConfigurationError,
    CredentialsError,
    ObjectChangedError,
    StorageError,
    UnsupportedURLError,
)
from shardstream.storage._obstore_settings import (
    AZURE_HELP,
    GCS_HELP,
    GOOGLE,
    NO_RETRIES,
    client_options,
    first_lines,
    import_obstore,
    says_past_the_end,
    says_refused,
)
from shardstream.storage.answers import tag
from shardstream.storage.base import ObjectInfo
from shardstream.storage.store_base import Failure, Kind, WritableStore

if TYPE_CHECKING:
    from shardstream.storage.azure import AzureStore  # azure and s3 import this module
    from shardstream.storage.s3 import S3Store

__all__ = ["ObstoreClient", "installed", "leave_to_forked_children", "usable_here"]

PAGE_KEYS = 1000  # S3's largest listing page, and the size of a page here
_T = TypeVar("_T")
_OPEN_LISTINGS = 8  # listings a client keeps open between pages (each is one stream)


class ObstoreClient(WritableStore):
    """One bucket (container, site) and prefix, reached through obstore.

    Build it with a factory (:meth:`of_s3_store`, :meth:`of_azure_store`, :meth:`gcs`,
    :meth:`http`). Keys are ``/``-separated and relative to the prefix. It is an
    :class:`~shardstream.storage.base.ObjectStore`: every method may do I/O; the constructor
    never does.

    Errors: a missing object raises :class:`~shardstream.errors.ObjectNotFoundError`, refused
    or missing credentials :class:`~shardstream.errors.CredentialsError` (saying what to set),
    anything else :class:`~shardstream.errors.StorageError`; messages name the full URL and
    never hold a secret.

    Args:
        root: The root's URL, e.g. ``s3://bucket/prefix`` (for messages and :meth:`url`).
        make_store: Makes the obstore store (called on first use, once per process).
        endpoint: The server, as messages name it.
        credentials_help: What to set, appended to credential errors.
        secrets: Strings that must never appear in a message (a set may grow meanwhile).
        writable: Whether the store takes writes, listings and deletes (HTTP does not).
        extra: The shardstream extra that installs obstore for this kind of store.
        relocate: Given a failed request's message, whether the store must be made again
            (a bucket found in another region); the request is then sent once more.
    """

    _identifies_reads = True  # a GET's ETag and size
    _ties_ranges = True  # a ranged GET's If-Match, and the ETag it answered
    _clients = ("_store",)  # made on first use, and again in a forked child

    def __init__(
        self,
        root: str,
        make_store: Callable[[], Any],
        *,
        endpoint: str,
        credentials_help: str,
        secrets: Collection[str] = (),
        writable: bool = True,
        extra: str = "s3",
        relocate: Callable[[str], bool] | None = None,
    ) -> None:
        self.root = root.rstrip("/")
        self.endpoint = endpoint
        self._make_store = make_store
        self._help = credentials_help
        self._handed = secrets
        self._relocate = relocate
        self._writable = writable
        self._extra = extra
        self._store: Any = None
        super().__init__()
        # Open listings by (prefix, token): each held stream serves its listing's next page.
        self._listings: OrderedDict[tuple[str, str], Iterator[Any]] = OrderedDict()

    def __repr__(self) -> str:
        return f"ObstoreClient({self.root!r}, endpoint={self.endpoint!r})"

    # --- factories ------------------------------------------------------------------------------

    @classmethod
    def of_s3_store(cls, checked: S3Store) -> ObstoreClient:
        """The obstore store of an :class:`~shardstream.storage.S3Store`'s settings (no I/O).

        A custom endpoint gets path-style requests, region ``us-east-1`` unless given, and plain
        ``http://`` when it names one. Credentials: ``key``/``secret``, else unsigned with
        ``anon`` (default ``SHARDSTREAM_S3_UNSIGNED``), else botocore's chain (the ``AWS_*``
        variables, profiles and ``~/.aws``, SSO, roles), refreshed as botocore refreshes it.

        The region, credentials and CA bundle botocore would use, settled on first use; a
        request the server refuses for the wrong region moves the client to the bucket's own
        region, once (:mod:`shardstream.storage._obstore_s3`).
        """
        from shardstream.storage._obstore_s3 import S3Settings  # S3's, imports botocore's chain

        settings = S3Settings(checked)
        return cls(checked.url(""), settings.make,
                   endpoint=checked.endpoint_url or "AWS (no S3_ENDPOINT_URL)",
                   credentials_help=checked._credentials_help(), secrets=settings.handed,
                   relocate=settings.relocate)  # fmt: skip

    @classmethod
    def gcs(
        cls,
        url: str,
        *,
        token: str | dict[str, Any] | None = None,
        endpoint_url: str | None = None,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
    ) -> ObstoreClient:
        """Google Cloud Storage or an emulator, with :class:`~shardstream.storage.GCSStore`'s.

        ``token``: a service-account key file's path, its parsed contents, or ``"anon"``;
        default anonymous with an emulator endpoint (``endpoint_url`` or
        ``STORAGE_EMULATOR_HOST``), else Application Default Credentials.

        Raises:
            ConfigurationError: The URL is not a ``gs://`` URL with a valid bucket name.
        """
        from shardstream.storage.gcs import parse_gcs_url

        _, bucket, prefix = parse_gcs_url(url)
        endpoint = (
            config.normalize_gcs_endpoint(endpoint_url)
            if endpoint_url
            else config.gcs_emulator_host()
        )
        settings: dict[str, Any] = {}
        secrets: list[str] = []
        if endpoint is not None:
            settings["base_url"] = endpoint
        if isinstance(token, dict):
            settings["service_account_key"] = json.dumps(token)
            secrets.append(str(token.get("private_key", "")))
        elif token == "anon" or (token is None and endpoint is not None):  # noqa: S105
            # object_store's one way to send no token at all (skip_signature still asks the
            # metadata server for one): a key that turns OAuth off.
            anonymous = {"disable_oauth": True, "client_email": "", "private_key": "",
                         "private_key_id": "", "gcs_base_url": endpoint or GOOGLE}  # fmt: skip
            settings["service_account_key"] = json.dumps(anonymous)
        elif token is not None:
            settings["service_account"] = os.fspath(token)
        client = client_options(connect_timeout, read_timeout, endpoint)

        def make() -> Any:
            store = import_obstore("obstore.store", "gcs")
            return store.GCSStore(bucket, prefix=prefix or None, config=settings,
                                  client_options=client, retry_config=NO_RETRIES)  # fmt: skip

        root = "gs://" + "/".join(part for part in (bucket, prefix) if part)
        return cls(root, make, endpoint=endpoint or "Google Cloud Storage",
                   credentials_help=GCS_HELP, secrets=secrets, extra="gcs")  # fmt: skip

    @classmethod
    def of_azure_store(cls, checked: AzureStore) -> ObstoreClient:
        """The obstore store of an :class:`~shardstream.storage.AzureStore`'s settings (no I/O).

        Its connection string, account key, SAS token or ``anon``; else ``object_store``'s own
        chain (the service principal or managed identity of the environment).
        """
        from shardstream.storage.azure import connection_fields

        account_key, sas_token = checked._account_key, checked._sas_token
        anon = checked._anon
        connect_timeout, read_timeout = checked.connect_timeout, checked.read_timeout
        endpoint = checked.endpoint_url
        if checked._connection_string:
            fields = connection_fields(checked._connection_string)
            account_key = fields.get("accountkey")
            sas_token = fields.get("sharedaccesssignature")
            endpoint = fields.get("blobendpoint", endpoint)
        settings: dict[str, Any] = {}
        if checked.account_name:
            settings["account_name"] = checked.account_name
        if endpoint:
            settings["endpoint"] = endpoint.rstrip("/")
        if anon:
            settings["skip_signature"] = True
        elif account_key:
            settings["account_key"] = account_key
        elif sas_token:
            settings["sas_key"] = sas_token.lstrip("?")
        client = client_options(connect_timeout, read_timeout, endpoint)
        container, prefix = checked.bucket, checked.prefix

        def make() -> Any:
            if not checked.account_name:
                raise CredentialsError(
                    f"using {checked.url('')} failed: no Azure storage account is known. "
                    f"{AZURE_HELP}."
                )
            store = import_obstore("obstore.store", "azure")
            return store.AzureStore(container, prefix=prefix or None, config=settings,
                                    client_options=client, retry_config=NO_RETRIES)  # fmt: skip

        shown = endpoint or f"https://{checked.account_name}.blob.core.windows.net"
        return cls(checked.url(""), make, endpoint=shown,
                   credentials_help=checked._credentials_help(),
                   secrets=[account_key or "", sas_token or "", checked._connection_string or ""],
                   extra="azure")  # fmt: skip

    @classmethod
    def http(
        cls, url: str, *, connect_timeout: float = 10.0, read_timeout: float = 60.0
    ) -> ObstoreClient:
        """A read-only site: ``read`` and ``head`` by plain GET and HEAD under ``url``.

        Raises:
            ConfigurationError: The URL is not an ``http://`` or ``https://`` URL.
        """
        if not url.startswith(("http://", "https://")) or "?" in url or "#" in url:
            raise ConfigurationError(
                f"{url.split('?')[0]!r} is not an HTTP URL: write http(s)://host[/path] with "
                "no query or fragment"
            )
        client = client_options(connect_timeout, read_timeout, url)

        def make() -> Any:
            store = import_obstore("obstore.store", "s3")
            return store.HTTPStore(url, client_options=client, retry_config=NO_RETRIES)

        return cls(url, make, endpoint=url, credentials_help="the site refused the request",
                   writable=False, extra="s3")  # fmt: skip

    # --- the primitives -------------------------------------------------------------------------

    def url(self, key: str) -> str:
        """The full URL of ``key`` (never with credentials)."""
        return f"{self.root}/{key}" if key else self.root

    def _read(self, key: str, start: int, end: int | None) -> bytes:
        """One GET: ranged, a suffix from ``start``, or the whole object."""
        if end is not None:
            return self._call(lambda obstore, store: bytes(
                obstore.get_range(store, key, start=start, end=end)))  # fmt: skip
        options = {"range": {"offset": start}} if start else None  # a suffix GET
        return self._call(lambda obstore, store: bytes(
            obstore.get(store, key, options=options).bytes()))  # fmt: skip

    def _read_range_info(
        self, key: str, start: int, end: int, etag: str | None
    ) -> tuple[bytes, ObjectInfo | None]:
        """One ranged GET, with the object's size and ETag (with ``If-Match``: compared too).

        The answer's ETag is compared too, for a server that ignores ``If-Match``.
        """
        changed = self._errors.PreconditionError
        options: dict[str, Any] = {"range": (start, end)}
        if etag is not None:
            options["if_match"] = f'"{etag}"'

        def get(obstore: ModuleType, store: Any) -> tuple[bytes, ObjectInfo | None]:
            try:
                result = obstore.get(store, key, options=options)
            except changed:
                raise ObjectChangedError(self.url(key)) from None
            meta = result.meta
            answered = tag(meta.get("e_tag"))
            if etag is not None and answered != etag:
                raise ObjectChangedError(self.url(key))
            size = meta.get("size")  # the object's, not the range's
            info = None if answered is None or size is None else ObjectInfo(int(size), answered)
            return bytes(result.bytes()), info

        return self._call(get)

    def _read_info(self, key: str) -> tuple[bytes, ObjectInfo]:
        """One GET of the whole object, with the size and ETag of its own answer."""

        def get(obstore: ModuleType, store: Any) -> tuple[bytes, ObjectInfo]:
            result = obstore.get(store, key)
            meta = result.meta
            data = bytes(result.bytes())
            return data, ObjectInfo(size=int(meta["size"]), etag=tag(meta.get("e_tag")))

        return self._call(get)

    def _write(self, local_path: str, key: str) -> None:
        """One PUT, or a multipart upload when large: readers see the whole object or none."""
        self._check_writable("writing", key)
        self._call(lambda obstore, store: obstore.put(store, key, Path(local_path)))

    def _list_page(
        self, prefix: str, start_after: str | None, token: str | None
    ) -> tuple[dict[str, ObjectInfo], str | None]:
        """One page (at most :data:`PAGE_KEYS`) of the objects whose keys start with ``prefix``.

        ``prefix`` is a plain string prefix (``"a/b"`` matches ``a/b.bin`` and ``a/b/c``).
        ``start_after``: begin after this key; ``token``: the second value of the previous
        page, ``None`` once the listing is done. Keys are relative to the root, sorted, without
        "folder" markers.

        Raises:
            UnsupportedURLError: The store has no listing (HTTP).
        """
        self._check_writable("listing", prefix)
        with self._lock:
            stream = self._listings.pop((prefix, token), None) if token else None
        # obstore lists whole path segments: list the prefix's folder, keep what matches.
        folder = (prefix.rpartition("/")[0] if not prefix.endswith("/") else prefix).rstrip("/")
        offset = max(filter(None, (token, start_after, prefix[:-1])), default=None)
        if first := stream is None:
            stream, chunk = self._stream(folder, offset)
        else:
            chunk = next(stream, [])
        infos: dict[str, ObjectInfo] = {}
        last = None
        after = max(filter(None, (token, start_after)), default="")
        for meta in chunk:
            name = str(meta["path"])
            last = name
            if name < prefix or name <= after:  # some backends list from the folder's start
                continue
            if not name.startswith(prefix):
                return infos, None  # sorted: every later key is past the prefix
            if not name.endswith("/"):
                infos[name] = ObjectInfo(size=int(meta["size"]), etag=tag(meta.get("e_tag")))
        if len(chunk) < PAGE_KEYS or last is None:
            if not (first and infos):
                self._confirm_end(folder, prefix, max(filter(None, (last, offset)), default=None))
            return infos, None
        with self._lock:
            self._listings[prefix, last] = stream
            while len(self._listings) > _OPEN_LISTINGS:
                self._listings.popitem(last=False)
        return infos, last

    def _head(self, key: str) -> ObjectInfo:
        meta = self._call(lambda obstore, store: obstore.head(store, key))
        return ObjectInfo(size=int(meta["size"]), etag=tag(meta.get("e_tag")))

    def _remove(self, key: str) -> None:
        self._check_writable("deleting", key)
        self._call(lambda obstore, store: obstore.delete(store, key))

    def _classify(self, exc: Exception) -> Failure | None:
        errors = self._errors
        detail = f"{type(exc).__name__}: {first_lines(exc)}"
        if isinstance(exc, (errors.NotFoundError, FileNotFoundError)):
            return Failure(Kind.NOT_FOUND, detail)
        refused = (errors.PermissionDeniedError, errors.UnauthenticatedError, PermissionError)
        if isinstance(exc, refused) or says_refused(str(exc)):
            return Failure(Kind.CREDENTIALS, detail)
        if isinstance(exc, (errors.BaseError, OSError, ValueError, RuntimeError)):
            kind = Kind.PAST_END if says_past_the_end(str(exc)) else Kind.OTHER
            return Failure(kind, detail)  # past the end: the base then names the size
        return None

    # --- hooks that shape messages --------------------------------------------------------------

    def _endpoint(self) -> str:
        return self.endpoint

    def _credentials_help(self) -> str:
        return self._help

    def _secrets(self) -> Sequence[str]:
        return list(self._handed)  # a copy: the set of handed-out secrets may grow meanwhile

    # --- internals ------------------------------------------------------------------------------

    def _obj(self) -> Any:
        """The obstore store, made on first use and again in a forked child.

        Raises:
            ConfigurationError: This process was forked from one whose obstore had already
                sent requests: its runtime's threads did not survive the fork, and a request
                would hang forever.
        """
        global _RUNTIME_PID  # one runtime a process: obstore's own
        if not usable_here():
            raise ConfigurationError(
                f"using {self.root} through obstore in a process forked after its parent used "
                "obstore would hang (obstore's runtime does not survive fork): start workers "
                "with multiprocessing_context='spawn' or 'forkserver', or set "
                "SHARDSTREAM_S3_CLIENT=botocore"
            )
        _RUNTIME_PID = os.getpid()
        if self._pid != os.getpid():  # the parent's open listings are streams of its runtime
            self._listings = OrderedDict()
        return self._lazy("_store", self._make_store)

    def _call(self, call: Callable[[ModuleType, Any], _T]) -> _T:
        """``call(obstore, store)``; sent once more if the store moved to another region."""
        obstore = self._module()
        store = self._obj()
        try:
            return call(obstore, store)
        except Exception as exc:
            if self._relocate is None:
                raise
            with self._lock:
                if self._store is store:  # else another thread moved it meanwhile
                    if not self._relocate(str(exc)):
                        raise
                    self._store = None  # made again for the bucket's region
        return call(obstore, self._obj())

    def _confirm_end(self, folder: str, prefix: str, after: str | None) -> None:
        """Refuse a listing that ended early, after ``after`` (``StorageError``, retried).

        ``object_store`` reads a ``200 OK`` page that is no listing (a gateway's) as an empty
        last page: a listing ending past its first page, or with no key, is asked once more.
        """
        names = (str(meta["path"]) for meta in self._stream(folder, after)[1])
        lost = next((n for n in names if n > (after or "") and n.startswith(prefix)), None)
        if lost is not None:
            raise StorageError(
                f"listing {self.url(prefix)} failed: a transfer error: a page ended the listing "
                f"before {lost!r}, which the server lists (a page that is no listing page)"
            )

    def _stream(self, folder: str, offset: str | None) -> tuple[Iterator[Any], Sequence[Any]]:
        """A listing's stream from just after ``offset``, and its first page."""

        def first(obstore: ModuleType, store: Any) -> tuple[Iterator[Any], Sequence[Any]]:
            stream = iter(obstore.list(store, folder or None, offset=offset, chunk_size=PAGE_KEYS))
            return stream, next(stream, [])

        return self._call(first)

    def _check_writable(self, action: str, key: str) -> None:
        if not self._writable:
            raise UnsupportedURLError(
                f"{action} {self.url(key)}: an HTTP store is read-only and has no listing"
            )

    @functools.cached_property
    def _errors(self) -> ModuleType:
        return import_obstore("obstore.exceptions", self._extra)

    def _module(self) -> ModuleType:
        return import_obstore("obstore", self._extra)


_RUNTIME_PID: int | None = None  # the process whose obstore has sent requests (and children)
_FORKING_PID: int | None = None  # a process that leaves obstore to the children it forks


def usable_here() -> bool:
    """Whether obstore can send requests in this process.

    Not in a child forked after its parent sent requests through obstore: the runtime's
    threads stay behind in the parent, and the child's requests would wait for them forever.
    Importing obstore and making stores before the fork is harmless. Nor in a process that
    leaves obstore to its forked children (:func:`leave_to_forked_children`), unless it had
    sent requests through obstore before.
    """
    pid = os.getpid()
    return pid == _RUNTIME_PID or (_RUNTIME_PID is None and pid != _FORKING_PID)


def leave_to_forked_children() -> None:
    """This process will fork readers: it sends no request through obstore from now on.

    Its stores read through their other client (botocore, adlfs) instead, so that obstore's
    runtime is never started here and every child forked from here can start its own: the
    children (DataLoader workers) make most of the requests, at a fraction of the other
    client's CPU a request. A process whose obstore has already sent requests keeps it (its
    children read through the other client, as before).
    """
    global _FORKING_PID
    _FORKING_PID = os.getpid()


@functools.cache
def installed() -> bool:
    """Whether the ``obstore`` package is installed (without importing it)."""
    return importlib.util.find_spec("obstore") is not None
