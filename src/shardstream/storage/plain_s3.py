"""S3 reads and listings through the standard library: SigV4-signed requests on ``http.client``.

A process that forks DataLoader workers sends no request through obstore (its runtime does
not survive ``fork()``), yet it reads a cold start's index and lists the dataset before the
workers start. Through botocore that costs its import and a client's start, more than the
requests themselves. Where an :class:`~shardstream.storage.S3Store`'s settings need nothing
of botocore's chain (keys given or in the ``AWS_*`` variables, or unsigned; no proxy; no
profile) this client serves its reads there instead, with the region, the CA bundle and the
move to a bucket's own region that the obstore client uses (``_obstore_s3.S3Settings``).
Elsewhere, and when :func:`unsupported` names a reason, botocore does.
"""

from __future__ import annotations

import functools
import http.client
import importlib.util
import os
import ssl
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlsplit
from xml.etree import ElementTree

from shardstream._version import __version__
from shardstream.errors import ObjectChangedError
from shardstream.storage import _aws_chain, obstore_client
from shardstream.storage._obstore_s3 import S3Settings
from shardstream.storage.answers import range_header, range_info, ranged_body, tag
from shardstream.storage.base import ObjectInfo
from shardstream.storage.s3_listing import page_objects, page_of_xml
from shardstream.storage.sigv4 import Signer, canonical_path, canonical_query
from shardstream.storage.store_base import BaseStore, Failure, Kind

if TYPE_CHECKING:
    from shardstream.storage.s3 import S3Store

__all__ = ["AUTH_CODES", "NOT_FOUND_CODES", "PlainS3Client", "unsupported"]

_AGENT = f"shardstream/{__version__} (plain)"
_IDLE_CONNECTIONS = 8  # kept open per client for the next request
_PROXIES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")
# S3 error codes that mean "who you are" rather than "what you asked for" (S3Store's too).
AUTH_CODES = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "Forbidden",
        "403",  # a HEAD's refusal has no body: its status alone
    }
)
NOT_FOUND_CODES = frozenset({"NoSuchKey", "NoSuchBucket", "404", "NotFound"})
_REFUSED = AUTH_CODES | {"401"}  # a bodiless 401 here names no code but its status
_CHANGED = 412  # If-Match refused
_PAST_END = 416
_MOVED = 301  # the bucket lies in another region
# A reused connection the server had closed fails before any answer: sent once more, anew.
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)


class Refused(Exception):
    """An S3 answer of status 300 or more: its status, error code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}" if message else f"{status} {code}")
        self.status = status
        self.code = code


class _Answer(NamedTuple):
    status: int
    headers: http.client.HTTPMessage
    body: bytes


def unsupported(store: S3Store) -> str | None:
    """Why this client cannot serve ``store`` as botocore would, or ``None`` when it can.

    It signs with a static key only (given, or botocore's first provider, the ``AWS_*``
    variables), honours no proxy and reads no profile, so any of those keeps botocore.
    """
    if any(os.environ.get(name) or os.environ.get(name.lower()) for name in _PROXIES):
        return "a proxy (HTTP(S)_PROXY)"
    if not store.anon and store._access_key is None and _aws_chain.static_keys() is None:
        return "credentials beyond the AWS_* variables (a profile, a role, SSO)"
    if _aws_chain.obstore_lacks(store.endpoint_url) is not None:
        return "an endpoint setting of AWS's configuration"
    return None


class PlainS3Client(BaseStore):
    """An :class:`~shardstream.storage.S3Store`'s reads and listings over ``http.client``.

    Make it with :meth:`of_s3_store` once :func:`unsupported` said nothing. Errors are
    shardstream's, named by the same URLs as the store's; no secret reaches a message.

    Args:
        checked: The store whose bucket, prefix, credentials and timeouts it uses.
        settings: The region it signs for, and the move to the bucket's own region.
    """

    _lists_from_key = True  # ListObjectsV2's start-after
    _identifies_reads = True  # a GET's ETag and Content-Length
    _ties_ranges = True  # a ranged GET's If-Match
    _clients = ("_idle",)  # a forked child opens its own connections
    _idle: _Idle | None

    def __init__(self, checked: S3Store, settings: S3Settings) -> None:
        self.checked = checked
        self.settings = settings
        keys = None if checked.anon else _aws_chain.static_keys()
        self._access_key = checked._access_key or (keys.access_key if keys else "")
        self._secret = checked._secret or (keys.secret_key if keys else "")
        self._token = None if checked._access_key or keys is None else keys.token
        self._signers: dict[str, Signer] = {}
        super().__init__()

    @classmethod
    def of_s3_store(cls, checked: S3Store) -> PlainS3Client:
        """The client of ``checked`` (no I/O)."""
        return cls(checked, S3Settings(checked))

    def __repr__(self) -> str:
        return f"PlainS3Client({self.url('')!r}, endpoint={self.checked.endpoint_url!r})"

    def url(self, key: str) -> str:
        """``s3://bucket/prefix/key``, as the store names it."""
        return self.checked.url(key)

    # --- the primitives -------------------------------------------------------------------------

    def _read(self, key: str, start: int, end: int | None) -> bytes:
        wanted = range_header(start, end)
        answer = self._get(key, {"Range": wanted} if wanted else {})
        return ranged_body(answer.body, answer.status, start, end)

    def _read_info(self, key: str) -> tuple[bytes, ObjectInfo]:
        answer = self._get(key, {})
        size = int(answer.headers.get("Content-Length", len(answer.body)))
        return answer.body, ObjectInfo(size=size, etag=tag(answer.headers.get("ETag")))

    def _read_range_info(
        self, key: str, start: int, end: int, etag: str | None
    ) -> tuple[bytes, ObjectInfo | None]:
        headers = {"Range": f"bytes={start}-{end - 1}"}
        if etag is not None:
            headers["If-Match"] = f'"{etag}"'
        try:
            answer = self._get(key, headers)
        except Refused as refused:
            if refused.status == _CHANGED:
                raise ObjectChangedError(self.url(key)) from None
            raise
        answered = answer.headers.get("ETag")
        if etag is not None and tag(answered) != etag:  # a server that ignored If-Match
            raise ObjectChangedError(self.url(key))
        body = ranged_body(answer.body, answer.status, start, end)
        return body, range_info(answer.headers.get("Content-Range"), answered)

    def _head(self, key: str) -> ObjectInfo:
        answer = self._send("HEAD", self._object_path(key), {}, {})
        size = int(answer.headers.get("Content-Length", "0"))
        return ObjectInfo(size=size, etag=tag(answer.headers.get("ETag")))

    def _list_page(
        self, prefix: str, start_after: str | None, token: str | None
    ) -> tuple[dict[str, ObjectInfo], str | None]:
        root = f"{self.checked.prefix}/" if self.checked.prefix else ""
        query = {"list-type": "2", "prefix": root + prefix, "encoding-type": "url",
                 "max-keys": str(obstore_client.PAGE_KEYS)}  # fmt: skip
        if token is not None:
            query["continuation-token"] = token
        elif start_after is not None:
            query["start-after"] = root + start_after
        answer = self._send("GET", self._bucket_path(""), query, {})
        page = page_of_xml(answer.body, self.url(prefix))
        following = page.get("NextContinuationToken")
        infos = page_objects(page, root, self.url(prefix))
        return infos, (following if page.get("IsTruncated") and following else None)

    def _classify(self, exc: Exception) -> Failure | None:
        detail = f"{type(exc).__name__}: {exc}"
        code = exc.code if isinstance(exc, Refused) else ""
        if isinstance(exc, PermissionError) or code in _REFUSED:
            return Failure(Kind.CREDENTIALS, detail)
        if isinstance(exc, FileNotFoundError) or code in NOT_FOUND_CODES:
            return Failure(Kind.NOT_FOUND, detail)
        if isinstance(exc, Refused) and (exc.status == _PAST_END or code == "InvalidRange"):
            return Failure(Kind.PAST_END, detail)  # the base then names the size
        if isinstance(exc, (Refused, OSError, http.client.HTTPException, ValueError)):
            return Failure(Kind.OTHER, detail)
        return None

    # --- hooks that shape messages --------------------------------------------------------------

    def _endpoint(self) -> str:
        return self.checked.endpoint_url or "AWS (no S3_ENDPOINT_URL)"

    def _credentials_help(self) -> str:
        return self.checked._credentials_help()

    def _secrets(self) -> Sequence[str]:
        return [secret for secret in (self._secret, self._token) if secret]

    # --- requests -------------------------------------------------------------------------------

    def _get(self, key: str, headers: Mapping[str, str]) -> _Answer:
        return self._send("GET", self._object_path(key), {}, headers)

    def _object_path(self, key: str) -> str:
        return self._bucket_path("/".join(part for part in (self.checked.prefix, key) if part))

    def _bucket_path(self, name: str) -> str:
        """The request's path: ``/bucket/name`` (path style) or ``/name`` (the bucket's host)."""
        return f"/{name}" if self._virtual_host() else f"/{self.checked.bucket}/{name}"

    def _virtual_host(self) -> bool:
        bucket = self.checked.bucket
        return self.checked.endpoint_url is None and "." not in bucket and bucket.islower()

    def _send(
        self, method: str, path: str, query: Mapping[str, str], headers: Mapping[str, str]
    ) -> _Answer:
        """One request, sent once more if the bucket moved to another region; ``Refused`` else."""
        region = self._region()
        try:
            return self._exchange(method, path, query, headers, region)
        except Refused as refused:
            if not self.settings.relocate(str(refused)):
                raise
        return self._exchange(method, path, query, headers, self._region())

    def _region(self) -> str:
        with self._lock:
            return self.settings.settled_region()

    def _exchange(
        self,
        method: str,
        path: str,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        region: str,
    ) -> _Answer:
        scheme, host, port = self._server(region)
        shown = host if port == (443 if scheme == "https" else 80) else f"{host}:{port}"
        sent = dict(headers)
        if self.checked.requester_pays:
            sent["x-amz-request-payer"] = "requester"
        if not self.checked.anon:
            sent = self._signer(region).headers(method, shown, path, query, sent)
        else:
            sent["host"] = shown
        sent["user-agent"] = _AGENT
        target = canonical_path(path) + (f"?{canonical_query(query)}" if query else "")
        for attempt in (0, 1):
            connection, reused = self._connection(scheme, host, port)
            try:
                connection.request(method, target, headers=sent)
                response = connection.getresponse()
                body = response.read()
            except _STALE:
                connection.close()
                if reused and attempt == 0:
                    continue
                raise
            except BaseException:
                connection.close()
                raise
            if response.will_close:
                connection.close()
            else:
                self._keep(connection)
            if response.status >= 300:
                raise _refusal(response.status, body)
            return _Answer(response.status, response.headers, body)
        raise AssertionError("unreachable")  # pragma: no cover

    def _server(self, region: str) -> tuple[str, str, int]:
        endpoint = self.checked.endpoint_url
        if endpoint is None:
            bucket = f"{self.checked.bucket}." if self._virtual_host() else ""
            return "https", f"{bucket}s3.{region}.amazonaws.com", 443
        parts = urlsplit(endpoint)
        scheme = parts.scheme.lower() or "https"
        return scheme, parts.hostname or "", parts.port or (443 if scheme == "https" else 80)

    def _signer(self, region: str) -> Signer:
        with self._lock:
            signer = self._signers.get(region)
            if signer is None:
                signer = Signer(self._access_key, self._secret, self._token, region)
                self._signers[region] = signer
            return signer

    def _connection(
        self, scheme: str, host: str, port: int
    ) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection to the server, or a new one; and whether it was idle."""
        idle: _Idle = self._lazy("_idle", _Idle)
        if (connection := idle.take((scheme, host, port))) is not None:
            return connection, True
        timeouts = {"timeout": self.checked.connect_timeout,
                    "read_timeout": self.checked.read_timeout}  # fmt: skip
        if scheme == "https":
            bundle = _aws_chain.configured("ca_bundle")
            context = _tls_context(str(bundle) if bundle else None)
            return _TLSConnection(host, port, context=context, **timeouts), False
        return _Connection(host, port, **timeouts), False

    def _keep(self, connection: http.client.HTTPConnection) -> None:
        scheme = "https" if isinstance(connection, http.client.HTTPSConnection) else "http"
        idle: _Idle = self._lazy("_idle", _Idle)
        idle.keep((scheme, connection.host, connection.port), connection)


class _Idle:
    """A client's idle connections, closed when it is forgotten (or by a forked child)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connections: list[tuple[tuple[str, str, int], http.client.HTTPConnection]] = []

    def take(self, server: tuple[str, str, int]) -> http.client.HTTPConnection | None:
        with self._lock:
            for index, (kept, connection) in enumerate(self._connections):
                if kept == server:
                    del self._connections[index]
                    return connection
        return None

    def keep(self, server: tuple[str, str, int], connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._connections) < _IDLE_CONNECTIONS:
                self._connections.append((server, connection))
                return
        connection.close()

    def __del__(self) -> None:
        for _, connection in self._connections:
            connection.close()


class _Connection(http.client.HTTPConnection):
    """A connection that waits ``timeout`` to connect, then ``read_timeout`` at each read."""

    def __init__(self, host: str, port: int, *, timeout: float, read_timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.read_timeout = read_timeout

    def connect(self) -> None:
        super().connect()
        self.sock.settimeout(self.read_timeout)


class _TLSConnection(http.client.HTTPSConnection):
    """:class:`_Connection` over TLS."""

    def __init__(
        self, host: str, port: int, *, context: ssl.SSLContext, timeout: float, read_timeout: float
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self.read_timeout = read_timeout

    def connect(self) -> None:
        super().connect()
        self.sock.settimeout(self.read_timeout)


def _refusal(status: int, body: bytes) -> Refused:
    """The error an S3 answer's XML names (a HEAD's has no body: its status alone)."""
    code, message = str(status), ""
    if body.lstrip().startswith(b"<"):
        try:
            root = ElementTree.fromstring(body)  # noqa: S314 (expat: no entity expansion)
        except ElementTree.ParseError:
            return Refused(status, code, "")
        fields = {child.tag.rpartition("}")[2]: child.text or "" for child in root}
        code, message = fields.get("Code") or code, fields.get("Message", "")
    elif status == _MOVED:  # a HEAD's redirect to the bucket's region has no body
        code = "PermanentRedirect"
    return Refused(status, code, message)


@functools.lru_cache(maxsize=4)
def _tls_context(bundle: str | None) -> ssl.SSLContext:
    """The certificates botocore trusts: ``AWS_CA_BUNDLE`` (``bundle``), else certifi's."""
    if bundle:
        return ssl.create_default_context(cafile=os.path.expanduser(bundle))
    if importlib.util.find_spec("certifi") is not None:
        import certifi

        return ssl.create_default_context(cafile=certifi.where())
    return ssl.create_default_context()
