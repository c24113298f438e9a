"""S3 and S3-compatible stores (MinIO, SeaweedFS, Ceph, ...) through s3fs.

Credentials come from botocore's standard chain (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``,
``AWS_PROFILE``, ``~/.aws/credentials``, instance roles) unless passed explicitly. The endpoint
comes from ``endpoint_url`` or the ``S3_ENDPOINT_URL`` variable (see :mod:`shardstream.config`);
with a custom endpoint, requests use path-style addressing and region ``us-east-1`` by default,
which is what most S3-compatible servers expect.

Public buckets can be read without credentials (``anon=True`` or ``SHARDSTREAM_S3_UNSIGNED=1``),
and requester-pays buckets need ``requester_pays=True`` or their name in
``SHARDSTREAM_S3_REQUESTER_PAYS``. The SDK's own retries are switched off: shardstream retries in
one place (uploads in the writer, downloads in :mod:`shardstream.storage.download`), so that
``retry=N`` means exactly N retries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from shardstream import config
from shardstream._optional import require
from shardstream.errors import ConfigurationError, ObjectChangedError
from shardstream.storage import _aws_chain, obstore_client
from shardstream.storage.answers import range_header, range_info, tag
from shardstream.storage.base import ObjectInfo
from shardstream.storage.keys import split_store_url
from shardstream.storage.obstore_client import ObstoreClient, installed, usable_here
from shardstream.storage.plain_s3 import AUTH_CODES, NOT_FOUND_CODES, PlainS3Client, unsupported
from shardstream.storage.s3_listing import RAW_LISTING, keep_raw_listing, page_objects
from shardstream.storage.store_base import Failure, Kind, WritableStore

__all__ = ["S3Store"]

logger = logging.getLogger(__name__)

_PURPOSE = "Reading and writing s3:// URLs"
_POOL = 32  # pooled connections of the reading client: parallel ranges of a few downloads
_CHANGED_CODES = frozenset({"PreconditionFailed", "412"})  # If-Match refused

_CREDENTIALS_HELP = (
    "S3 credentials come from the standard AWS chain: the AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY variables, AWS_PROFILE or ~/.aws/credentials, or an instance role; "
    "the endpoint comes from endpoint_url= or the S3_ENDPOINT_URL variable"
)


class S3Store(WritableStore):
    """A bucket and prefix on S3 or an S3-compatible server, used as a dataset root.

    The constructor only checks its arguments; the connection is made on first use.
    ``put_file`` is atomic for readers: a small file is sent in a single PUT and a large one as a
    multipart upload, and S3 shows neither until it is complete.

    Args:
        url: ``s3://bucket`` or ``s3://bucket/prefix``.
        endpoint_url: The server, e.g. ``http://127.0.0.1:8333`` (default: ``S3_ENDPOINT_URL``,
            else AWS itself).
        region: The region to sign requests for (default: ``us-east-1`` with a custom endpoint,
            else botocore's own choice).
        key: An access key id, instead of the standard AWS chain (pass ``secret`` with it).
        secret: The secret access key that goes with ``key``; never shown in messages or logs.
        anon: Send requests unsigned, for public buckets (default: ``SHARDSTREAM_S3_UNSIGNED``).
        requester_pays: Say that the requester pays, as requester-pays buckets demand (default:
            whether the bucket is named in ``SHARDSTREAM_S3_REQUESTER_PAYS``).
        connect_timeout: Seconds to wait for a connection.
        read_timeout: Seconds to wait for the server between two reads of a socket (align it
            with :attr:`DownloadOptions.timeout <shardstream.storage.DownloadOptions>`
            so that a request abandoned by a download ends soon after).
        storage_options: More keyword arguments for ``s3fs.S3FileSystem``, which writes and
            lists (reads go through a botocore client with the same settings).

    Raises:
        ConfigurationError: The URL is not an ``s3://`` URL with a bucket, only one of ``key``
            and ``secret`` was given, credentials came with ``anon=True``, or a timeout is not
            positive.
    """

    _lists_from_key = True  # ListObjectsV2's StartAfter
    _identifies_reads = True  # a GET's ETag and Content-Length
    _ties_ranges = True  # a ranged GET's If-Match
    _clients = ("_fs", "_client", "_obstore", "_plain")  # a forked child settles its own
    _default_endpoint = "AWS (no S3_ENDPOINT_URL)"
    _credentials_text = _CREDENTIALS_HELP
    _fs: Any
    _client: Any

    def __init__(
        self,
        url: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        key: str | None = None,
        secret: str | None = None,
        anon: bool | None = None,
        requester_pays: bool | None = None,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        instead = " and pass credentials as key=/secret= or through the AWS chain"
        parts = split_store_url(url, ("s3",), "an S3 URL", "s3://bucket[/prefix]", instead)
        if (key is None) != (secret is None):
            raise ConfigurationError(
                f"S3Store({url!r}): pass both key and secret, or neither (to use the AWS chain)"
            )
        if anon and key is not None:
            raise ConfigurationError(
                f"S3Store({url!r}): anon=True sends requests unsigned; pass no key and secret"
            )
        self.bucket = parts.netloc
        self.prefix = parts.path.strip("/")
        self._check_timeouts(connect_timeout=connect_timeout, read_timeout=read_timeout)
        self.endpoint_url = endpoint_url if endpoint_url is not None else config.s3_endpoint_url()
        self.region = region
        self.anon = (config.s3_unsigned() and key is None) if anon is None else anon
        self.requester_pays = (
            self.bucket in config.s3_requester_pays_buckets()
            if requester_pays is None
            else requester_pays
        )
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._access_key = key
        self._secret = secret
        self._storage_options = dict(storage_options or {})
        self._read_client = config.s3_client()  # "auto" until the first read settles it
        self._obstore: ObstoreClient | bool | None = None  # False: reads through botocore
        self._plain: PlainS3Client | bool | None = None  # where obstore cannot send requests
        super().__init__()

    def __repr__(self) -> str:
        return f"S3Store({self.url('')!r}, endpoint_url={self.endpoint_url!r}, anon={self.anon})"

    def url(self, key: str) -> str:
        """``s3://bucket/prefix/key`` (never with credentials or the endpoint's secrets)."""
        return "s3://" + "/".join(part for part in (self.bucket, self.prefix, key) if part)

    def size(self, key: str) -> int:
        """The size in bytes of the object under ``key`` (``info(key).size``).

        Raises:
            ObjectNotFoundError: No object under ``key``.
        """
        return self.info(key).size

    # --- the primitives -------------------------------------------------------------------------

    def _write(self, local_path: str, key: str) -> None:
        """One PUT, or a multipart upload when large (S3 shows neither until it is complete)."""
        self._filesystem().put_file(local_path, self._path(key))

    def _remove(self, key: str) -> None:
        bucket, name = self._bucket_and_name(key)
        self._reader().delete_object(Bucket=bucket, Key=name, **self._request_options())

    def _head(self, key: str) -> ObjectInfo:
        bucket, name = self._bucket_and_name(key)
        head = self._reader().head_object(Bucket=bucket, Key=name, **self._request_options())
        return ObjectInfo(size=int(head["ContentLength"]), etag=tag(head.get("ETag")))

    def _read(self, key: str, start: int, end: int | None) -> bytes:
        """One GET (ranged unless the whole object is asked for), its body read whole."""
        bucket, name = self._bucket_and_name(key)
        options = self._request_options()
        if wanted := range_header(start, end):
            options["Range"] = wanted
        response = self._reader().get_object(Bucket=bucket, Key=name, **options)
        body = response["Body"]
        try:
            data: bytes = body.read()  # botocore checks the length against Content-Length
        finally:
            body.close()
        return data

    def _read_range_info(
        self, key: str, start: int, end: int, etag: str | None
    ) -> tuple[bytes, ObjectInfo | None]:
        """One ranged GET through botocore, with the size and ETag it answered (``If-Match``)."""
        bucket, name = self._bucket_and_name(key)
        options = self._request_options()
        if etag is not None:
            options["IfMatch"] = f'"{etag}"'
        try:
            response = self._reader().get_object(
                Bucket=bucket, Key=name, Range=f"bytes={start}-{end - 1}", **options
            )
        except Exception as exc:
            if getattr(exc, "response", {}).get("Error", {}).get("Code") in _CHANGED_CODES:
                raise ObjectChangedError(self.url(key)) from None
            raise
        body = response["Body"]
        try:
            data: bytes = body.read()  # botocore checks the length against Content-Length
        finally:
            body.close()
        if etag is not None and tag(response.get("ETag")) != etag:  # one that ignored If-Match
            raise ObjectChangedError(self.url(key))
        return data, range_info(response.get("ContentRange"), response.get("ETag"))

    def _read_info(self, key: str) -> tuple[bytes, ObjectInfo]:
        """One GET of the whole object, with the ETag and size it answered."""
        bucket, name = self._bucket_and_name(key)
        response = self._reader().get_object(Bucket=bucket, Key=name, **self._request_options())
        body = response["Body"]
        try:
            data: bytes = body.read()  # botocore checks the length against Content-Length
        finally:
            body.close()
        size = int(response.get("ContentLength", len(data)))
        return data, ObjectInfo(size=size, etag=tag(response.get("ETag")))

    def _list_page(
        self, prefix: str, start_after: str | None, token: str | None
    ) -> tuple[dict[str, ObjectInfo], str | None]:
        """One ListObjectsV2 page, through the client of reads.

        A reader's start imports no s3fs. Where reads go through obstore the page does too:
        its XML is read in Rust, off the GIL. Else through the botocore client of reads.
        """
        if fast := self._fast_reader():
            return fast.list_page(prefix, start_after, token)
        root = f"{self.prefix}/" if self.prefix else ""
        # Keys come URL-encoded (so that any key survives XML), decoded here: the raw page
        # bypasses botocore's own decoding (see storage/s3_listing.py).
        request: dict[str, Any] = {"Bucket": self.bucket, "Prefix": root + prefix,
                                   "EncodingType": "url",
                                   "MaxKeys": obstore_client.PAGE_KEYS}  # fmt: skip
        request.update(self._request_options())
        if token is not None:
            request["ContinuationToken"] = token
        elif start_after is not None:
            request["StartAfter"] = root + start_after
        page = self._reader().list_objects_v2(**request)
        infos = page_objects(page, root, self.url(prefix))
        following = page.get("NextContinuationToken")
        return infos, (following if page.get("IsTruncated") and following else None)

    def _classify(self, exc: Exception) -> Failure | None:
        botocore = require("botocore.exceptions", extra="s3", purpose=_PURPOSE)
        detail = f"{type(exc).__name__}: {exc}"
        code = ""
        if isinstance(exc, botocore.ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
        refused = (PermissionError, botocore.NoCredentialsError, botocore.PartialCredentialsError)
        if isinstance(exc, refused) or code in AUTH_CODES:
            return Failure(Kind.CREDENTIALS, detail)
        if isinstance(exc, FileNotFoundError) or code in NOT_FOUND_CODES:
            return Failure(Kind.NOT_FOUND, detail)
        if code == "InvalidRange":  # a 416: the base then names the size
            return Failure(Kind.PAST_END, detail)
        # aiohttp's errors (a body cut short, a dropped connection) are not OSErrors, nor is
        # asyncio's TimeoutError before Python 3.11.
        aiohttp = require("aiohttp", extra="s3", purpose=_PURPOSE)
        network = (OSError, asyncio.TimeoutError, aiohttp.ClientError)
        if isinstance(exc, (*network, botocore.BotoCoreError, botocore.ClientError)):
            return Failure(Kind.OTHER, detail)
        return None

    def _secrets(self) -> Sequence[str]:
        return (self._secret,) if self._secret else ()

    # --- internals ------------------------------------------------------------------------------

    def _path(self, key: str) -> str:
        """``bucket/prefix/key`` as s3fs spells it."""
        self._key(key)
        return "/".join(part for part in (self.bucket, self.prefix, key) if part)

    def _bucket_and_name(self, key: str) -> tuple[str, str]:
        """The bucket and the object's name in it, as botocore takes them."""
        bucket, _, name = self._path(key).partition("/")
        return bucket, name

    def _request_options(self) -> dict[str, str]:
        return {"RequestPayer": "requester"} if self.requester_pays else {}

    def _fast_reader(self) -> ObstoreClient | PlainS3Client | None:
        """The transport of reads, or ``None`` where botocore serves them.

        Settled on the first read: obstore when asked (``SHARDSTREAM_S3_CLIENT=obstore``) or,
        by default, when it is installed; botocore when asked, and wherever obstore lacks what
        the configuration needs (:func:`~shardstream.storage._aws_chain.obstore_lacks`). Where
        obstore cannot send requests (a process that forks readers, or one forked after its
        parent read through obstore: obstore's runtime does not survive ``fork()``), or when
        asked (``plain``), the standard library's client
        (:class:`~shardstream.storage.plain_s3.PlainS3Client`) where the settings allow it,
        else botocore.
        """
        if self._read_client == "botocore":
            return None
        if self._read_client == "plain" or not usable_here():
            return self._lazy("_plain", self._settle_plain_client) or None
        return self._lazy("_obstore", self._settle_read_client) or None

    def _settle_read_client(self) -> ObstoreClient | bool:
        """The obstore transport, or ``False`` where reads go through botocore."""
        if self._read_client == "auto" and not installed():
            return False
        lacking = _aws_chain.obstore_lacks(self.endpoint_url)
        if lacking is not None:
            level = logging.WARNING if self._read_client == "obstore" else logging.DEBUG
            logger.log(level, "%s: reads go through botocore, as obstore does not support %s",
                       self.url(""), lacking)  # fmt: skip
            return False
        return ObstoreClient.of_s3_store(self)

    def _settle_plain_client(self) -> PlainS3Client | bool:
        """The standard library's transport, or ``False`` where reads go through botocore."""
        if self._read_client == "auto" and not installed():
            return False  # botocore serves every process alike, as it would obstore's
        lacking = unsupported(self)
        if lacking is not None:
            level = logging.WARNING if self._read_client == "plain" else logging.DEBUG
            logger.log(level, "%s: reads go through botocore, as the plain client does not "
                       "support %s", self.url(""), lacking)  # fmt: skip
            return False
        return PlainS3Client.of_s3_store(self)

    def _region(self) -> str | None:
        return self.region or ("us-east-1" if self.endpoint_url is not None else None)

    def _config_kwargs(self) -> dict[str, Any]:
        """The ``botocore.config.Config`` settings of both the reading client and s3fs."""
        settings: dict[str, Any] = {
            "connect_timeout": self.connect_timeout,
            "read_timeout": self.read_timeout,
            # One attempt per call: callers retry, and count their retries exactly.
            "retries": {"max_attempts": 0, "mode": "standard"},
        }
        if self.endpoint_url is not None:
            settings["s3"] = {"addressing_style": "path"}
        return settings

    def _reader(self) -> Any:
        """A botocore client for reads, created on first use.

        Reads go through botocore's thread-safe, blocking client rather than s3fs: its urllib3
        connections move bytes faster than s3fs's single event loop thread, and parallel byte
        ranges run truly in parallel from download threads.
        """
        return self._lazy("_client", self._create_reader)

    def _create_reader(self) -> Any:
        botocore_config = require("botocore.config", extra="s3", purpose=_PURPOSE)
        settings = self._config_kwargs()
        if self.anon:
            settings["signature_version"] = require(
                "botocore", extra="s3", purpose=_PURPOSE
            ).UNSIGNED
        config = botocore_config.Config(max_pool_connections=_POOL, **settings)
        options: dict[str, Any] = {"config": config, "region_name": self._region()}
        if self.endpoint_url is not None:
            options["endpoint_url"] = self.endpoint_url
        if self._access_key is not None:
            options["aws_access_key_id"] = self._access_key
            options["aws_secret_access_key"] = self._secret
        client = _aws_chain.SESSIONS.client(options)
        client.meta.events.register(
            "before-parse.s3.ListObjectsV2", keep_raw_listing, unique_id=RAW_LISTING
        )
        return client

    def _filesystem(self) -> Any:
        """The s3fs filesystem that writes and lists, created on first use (no I/O before)."""
        return self._lazy("_fs", self._create_filesystem)

    def _create_filesystem(self) -> Any:
        s3fs = require("s3fs", extra="s3", purpose=_PURPOSE)
        options: dict[str, Any] = {
            "skip_instance_cache": True,  # a store's credentials are its own
            "use_listings_cache": False,  # others may write the same bucket
        }
        client_kwargs: dict[str, Any] = {}
        config_kwargs = self._config_kwargs()
        if self.endpoint_url is not None:
            options["endpoint_url"] = self.endpoint_url
        region = self._region()
        if region is not None:
            client_kwargs["region_name"] = region
        if self._access_key is not None:
            options["key"] = self._access_key
            options["secret"] = self._secret
        if self.anon:
            options["anon"] = True
        if self.requester_pays:
            options["requester_pays"] = True
        if client_kwargs:
            options["client_kwargs"] = client_kwargs
        options["config_kwargs"] = config_kwargs
        session = require("aiobotocore.session", extra="s3", purpose=_PURPOSE)
        options["session"] = session.AioSession()
        # aiohttp awaits a "100 Continue" with no timeout: a silent server would hold a
        # PUT forever, so uploads go without "Expect" (S3 takes both).
        options["session"].register("before-sign.s3", _no_expect_header)
        options.update(self._storage_options)
        filesystem = s3fs.S3FileSystem(**options)
        filesystem.retries = 1  # s3fs's own retry loop: one attempt (see above)
        return filesystem


def _no_expect_header(request: Any, **kwargs: Any) -> None:
    """Drop a request's ``Expect: 100-continue`` (a botocore ``before-sign`` handler)."""
    del request.headers["Expect"]
