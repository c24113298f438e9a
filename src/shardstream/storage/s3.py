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
import contextlib
import os
import re
import threading
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import unquote_plus, urlsplit
from xml.etree import ElementTree

from shardstream import config
from shardstream._optional import require
from shardstream.errors import (
    ConfigurationError,
    CredentialsError,
    ObjectNotFoundError,
    ShardstreamError,
    StorageError,
)
from shardstream.storage.answers import exists_by_info
from shardstream.storage.base import ObjectInfo
from shardstream.storage.keys import check_key, check_range, url_for_message
from shardstream.storage.obstore_client import ObstoreClient, usable_here

__all__ = ["S3Store"]

_PURPOSE = "Reading and writing s3:// URLs"
_POOL = 32  # pooled connections of the reading client: parallel ranges of a few downloads
_RAW_LISTING = "shardstream-raw-listing"  # where a listing page's own XML travels
_CONTENTS = re.compile(rb"<Contents>.*?</Contents>", re.DOTALL)  # keys are escaped: no "<"
_PAGE_KEYS = 1000  # S3's largest listing page
_MAX_PAGES = 1_000_000  # a billion keys: a bound on a listing's loop, never reached

# S3 error codes that mean "who you are" rather than "what you asked for".
_AUTH_CODES = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "403",  # a HEAD request's refusal has no body, so no code but the status
        "Forbidden",
    }
)

_CREDENTIALS_HELP = (
    "S3 credentials come from the standard AWS chain: the AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY variables, AWS_PROFILE or ~/.aws/credentials, or an instance role; "
    "the endpoint comes from endpoint_url= or the S3_ENDPOINT_URL variable"
)


class S3Store:
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
        parts = urlsplit(url)
        if parts.scheme.lower() != "s3" or not parts.netloc:
            raise ConfigurationError(
                f"{url_for_message(url)!r} is not an S3 URL: write s3://bucket[/prefix]"
            )
        if parts.query or parts.fragment:
            raise ConfigurationError(
                f"{url_for_message(url)!r}: an s3:// URL takes no query or fragment; drop it "
                "and pass credentials as key=/secret= or through the AWS chain"
            )
        if (key is None) != (secret is None):
            raise ConfigurationError(
                f"S3Store({url!r}): pass both key and secret, or neither (to use the AWS chain)"
            )
        if anon and key is not None:
            raise ConfigurationError(
                f"S3Store({url!r}): anon=True sends requests unsigned; pass no key and secret"
            )
        if not (connect_timeout > 0 and read_timeout > 0):
            raise ConfigurationError(
                f"S3Store({url!r}): connect_timeout={connect_timeout} and "
                f"read_timeout={read_timeout} must be positive numbers of seconds"
            )
        self.bucket = parts.netloc
        self.prefix = parts.path.strip("/")
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
        self._key = key
        self._secret = secret
        self._storage_options = dict(storage_options or {})
        self._fs: Any = None
        self._client: Any = None
        self._fs_pid = os.getpid()
        self._lock = threading.Lock()
        self._obstore_reads = config.s3_client() == "obstore"
        self._obstore: ObstoreClient | None = None

    def __repr__(self) -> str:
        return f"S3Store({self.url('')!r}, endpoint_url={self.endpoint_url!r}, anon={self.anon})"

    # --- the ObjectStore protocol ---------------------------------------------------------------

    def put_file(self, local_path: str, key: str) -> None:
        """Upload the file at ``local_path`` to ``key`` (one PUT, or multipart when large).

        Raises:
            CredentialsError: The server refused the credentials, or none were found.
            StorageError: Any other failure of the request.
        """
        os.stat(local_path)  # a missing local file is the caller's FileNotFoundError, not ours
        with self._boundary("uploading to", key):
            self._filesystem().put_file(local_path, self._path(key))

    def delete(self, key: str) -> None:
        """Delete the object under ``key`` in one DeleteObject (a missing object is not an error).

        Raises:
            CredentialsError: The server refused the credentials, or none were found.
            StorageError: Any other failure of the request.
        """
        bucket, name = self._bucket_and_name(key)
        with self._boundary("deleting", key):
            self._reader().delete_object(Bucket=bucket, Key=name, **self._request_options())

    def url(self, key: str) -> str:
        """``s3://bucket/prefix/key`` (never with credentials or the endpoint's secrets)."""
        return "s3://" + "/".join(part for part in (self.bucket, self.prefix, key) if part)

    # --- reading --------------------------------------------------------------------------------

    def get_bytes(self, key: str) -> bytes:
        """The whole object under ``key``, in one GET.

        Raises:
            ObjectNotFoundError: No object under ``key``.
            CredentialsError: The server refused the credentials, or none were found.
            StorageError: Any other failure of the request.
        """
        if self._obstore_reads and usable_here():
            return self._fast_reader().read(key, 0, None)
        return self._get(key, {})

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``start .. end - 1`` of the object under ``key``, in one ranged GET.

        Raises:
            ConfigurationError: The range is negative or reversed.
            ObjectNotFoundError: No object under ``key``.
            CredentialsError: The server refused the credentials, or none were found.
            StorageError: The range runs past the end of the object, or the request failed.
        """
        self._path(key)
        check_range(start, end, self.url(key))
        if start == end:
            return b""
        if self._obstore_reads and usable_here():  # else botocore: a fork of an obstore user
            return self._fast_reader().read(key, start, end)
        data = self._get(key, {"Range": f"bytes={start}-{end - 1}"})
        if len(data) != end - start:
            raise StorageError(
                f"reading {self.url(key)}: byte range [{start}, {end}) runs past the end of the "
                f"object (the server sent {len(data)} bytes)"
            )
        return data

    def info(self, key: str) -> ObjectInfo:
        """The object's size and ETag, from one HEAD request.

        Raises:
            ObjectNotFoundError: No object under ``key`` (a "folder" is not an object).
            CredentialsError: The server refused the credentials, or none were found.
            StorageError: Any other failure of the request.
        """
        bucket, name = self._bucket_and_name(key)
        with self._boundary("checking", key):
            head = self._reader().head_object(Bucket=bucket, Key=name, **self._request_options())
        etag = head.get("ETag")
        return ObjectInfo(size=int(head["ContentLength"]), etag=etag.strip('"') if etag else None)

    def exists(self, key: str) -> bool:
        """Whether an object exists under ``key`` (a prefix of other keys is not one)."""
        return exists_by_info(self.info, key)

    def size(self, key: str) -> int:
        """The size in bytes of the object under ``key`` (``info(key).size``).

        Raises:
            ObjectNotFoundError: No object under ``key``.
        """
        return self.info(key).size

    def list(self, prefix: str = "") -> list[str]:
        """The keys (relative to the store's root) that start with ``prefix``, sorted."""
        return sorted(self.list_info(prefix))

    def list_info(self, prefix: str = "") -> dict[str, ObjectInfo]:
        """:meth:`list`, with each object's size and ETag: ListObjectsV2, page by page.

        Through the botocore client of reads, so a reader's start imports no s3fs.
        """
        root = f"{self.prefix.strip('/')}/" if self.prefix.strip("/") else ""
        infos: dict[str, ObjectInfo] = {}
        with self._boundary("listing", prefix):
            client = self._reader()
            # Keys come URL-encoded (so that any key survives XML), decoded here: the raw
            # page bypasses botocore's own decoding (see _keep_raw_listing).
            request: dict[str, Any] = {"Bucket": self.bucket, "Prefix": root + prefix,
                                       "EncodingType": "url", "MaxKeys": _PAGE_KEYS}  # fmt: skip
            request.update(self._request_options())
            for _ in range(_MAX_PAGES):
                page = client.list_objects_v2(**request)
                # A server that ignores EncodingType does not echo it (botocore reads it so).
                encoded = page.get("EncodingType") == "url"
                raw = page.get(_RAW_LISTING)
                listed = (
                    _listed_objects(raw, encoded, self.url(prefix))
                    if raw is not None
                    else list(_parsed_objects(page))
                )
                for name, size, etag in listed:
                    key = name[len(root) :]
                    if key and not key.endswith("/"):  # "folder" markers are no objects
                        infos[key] = ObjectInfo(size=size, etag=etag.strip('"') if etag else None)
                token = page.get("NextContinuationToken")
                if not page.get("IsTruncated") or not token:
                    return infos
                request["ContinuationToken"] = token
        raise StorageError(
            f"listing {self.url(prefix)} gave more than {_MAX_PAGES} pages: stopped, as a server "
            "that always says there is more would never let a listing end"
        )

    # --- internals ------------------------------------------------------------------------------

    def _path(self, key: str) -> str:
        """``bucket/prefix/key`` as s3fs spells it."""
        check_key(key, self.url(""))
        return "/".join(part for part in (self.bucket, self.prefix, key) if part)

    def _bucket_and_name(self, key: str) -> tuple[str, str]:
        """The bucket and the object's name in it, as botocore takes them."""
        bucket, _, name = self._path(key).partition("/")
        return bucket, name

    def _request_options(self) -> dict[str, str]:
        return {"RequestPayer": "requester"} if self.requester_pays else {}

    def _fast_reader(self) -> ObstoreClient:
        """The obstore transport of reads (``SHARDSTREAM_S3_CLIENT=obstore``), made once."""
        if self._obstore is None:
            self._obstore = ObstoreClient.s3(
                self.url(""), endpoint_url=self.endpoint_url, region=self.region, key=self._key,
                secret=self._secret, anon=self.anon, requester_pays=self.requester_pays,
                connect_timeout=self.connect_timeout, read_timeout=self.read_timeout,
            )  # fmt: skip
        return self._obstore

    def _get(self, key: str, options: dict[str, str]) -> bytes:
        """One GET (of a range, with ``Range`` in ``options``), its body read whole."""
        bucket, name = self._bucket_and_name(key)
        with self._boundary("reading", key):
            response = self._reader().get_object(
                Bucket=bucket, Key=name, **options, **self._request_options()
            )
            body = response["Body"]
            try:
                data: bytes = body.read()  # botocore checks the length against Content-Length
            finally:
                body.close()
        return data

    def _this_process(self) -> None:
        """Forget a parent process's clients: a forked DataLoader worker makes its own.

        fsspec's event loop and pooled connections do not survive a fork.
        """
        if self._fs_pid != os.getpid():
            self._lock = threading.Lock()  # a lock copied mid-use by fork would never open
            self._fs, self._client, self._fs_pid = None, None, os.getpid()

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
        self._this_process()
        with self._lock:
            if self._client is None:
                session = require("botocore.session", extra="s3", purpose=_PURPOSE)
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
                if self._key is not None:
                    options["aws_access_key_id"] = self._key
                    options["aws_secret_access_key"] = self._secret
                client = session.get_session().create_client("s3", **options)
                client.meta.events.register(
                    "before-parse.s3.ListObjectsV2", _keep_raw_listing, unique_id=_RAW_LISTING
                )
                self._client = client
            return self._client

    def _filesystem(self) -> Any:
        """The s3fs filesystem that writes and lists, created on first use (no I/O before)."""
        self._this_process()
        with self._lock:
            if self._fs is None:
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
                if self._key is not None:
                    options["key"] = self._key
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
                self._fs = filesystem
            return self._fs

    @contextlib.contextmanager
    def _boundary(self, action: str, key: str) -> Iterator[None]:
        """Turn s3fs's and botocore's errors into shardstream's, naming the URL."""
        try:
            yield
        except ShardstreamError:
            raise
        except Exception as exc:
            translated = self._translate(exc, action, key)
            if translated is None:
                raise
            raise translated from exc

    def _translate(self, exc: Exception, action: str, key: str) -> StorageError | None:
        botocore = require("botocore.exceptions", extra="s3", purpose=_PURPOSE)
        where = f"{action} {self.url(key)}"
        endpoint = self.endpoint_url or "AWS (no S3_ENDPOINT_URL)"
        detail = self._scrub(f"{type(exc).__name__}: {exc}")
        code = ""
        if isinstance(exc, botocore.ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
        refused = (PermissionError, botocore.NoCredentialsError, botocore.PartialCredentialsError)
        if isinstance(exc, refused) or code in _AUTH_CODES:
            return CredentialsError(
                f"{where} failed: the server at {endpoint} refused the credentials, or none were "
                f"found ({detail}). {_CREDENTIALS_HELP}."
            )
        if isinstance(exc, FileNotFoundError) or code in (
            "NoSuchKey",
            "NoSuchBucket",
            "404",
            "NotFound",
        ):
            return ObjectNotFoundError(f"{where} failed: no such object or bucket ({detail})")
        # aiohttp's errors (a body cut short, a dropped connection) are not OSErrors, nor is
        # asyncio's TimeoutError before Python 3.11.
        aiohttp = require("aiohttp", extra="s3", purpose=_PURPOSE)
        network = (OSError, asyncio.TimeoutError, aiohttp.ClientError)
        if isinstance(exc, (*network, botocore.BotoCoreError, botocore.ClientError)):
            return StorageError(f"{where} failed at {endpoint}: {detail}")
        return None

    def _scrub(self, text: str) -> str:
        """``text`` without the secret key, should a server ever echo it."""
        if self._secret:
            text = text.replace(self._secret, "***")
        return text


def _keep_raw_listing(
    response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **kwargs: Any
) -> None:
    """Hand a listing page's XML to :meth:`S3Store.list_info` and spare botocore its objects.

    botocore's modelled parser costs more CPU a page than the page's round trip to a distant
    region (docs/design/wan-link.md): the objects of a successful page are
    read with ElementTree instead (:func:`_listed_objects`) and cut from what botocore parses,
    which keeps the page's truncation flag and continuation token. Errors parse as usual.
    """
    body = response_dict.get("body")
    if response_dict.get("status_code", 500) >= 300 or not isinstance(body, bytes):
        return
    customized_response_dict[_RAW_LISTING] = body
    response_dict["body"] = _CONTENTS.sub(b"", body)


def _listed_objects(page: bytes, encoded: bool, url: str) -> list[tuple[str, int, str | None]]:
    """``(key, size, etag)`` of each object of a ListObjectsV2 page; ``encoded``: URL-encoded.

    Raises:
        StorageError: The ``200 OK`` answer is no listing page (a gateway's HTML page, a body
            cut short): a transfer error, retried as one; read as a page of no keys, it would
            end the listing early and every later object would seem deleted.
    """
    # The page comes from the store the caller named, parsed as botocore parses it (expat
    # refuses entity expansion attacks).
    try:
        root = ElementTree.fromstring(page)  # noqa: S314
    except ElementTree.ParseError as exc:
        raise _not_a_listing(url, page, f"not XML ({exc})") from exc
    name = root.tag.rpartition("}")[2]
    if name != "ListBucketResult":
        raise _not_a_listing(url, page, f"a <{name}> document")
    return list(_objects(root, encoded))


def _not_a_listing(url: str, page: bytes, what: str) -> StorageError:
    return StorageError(
        f"listing {url} failed: a transfer error: the server answered 200 OK with "
        f"{len(page)} bytes that are no listing page but {what}"
    )


def _objects(root: ElementTree.Element, encoded: bool) -> Iterator[tuple[str, int, str | None]]:
    for element in root:
        if element.tag.rpartition("}")[2] != "Contents":
            continue
        fields = {child.tag.rpartition("}")[2]: child.text or "" for child in element}
        key = unquote_plus(fields["Key"]) if encoded else fields["Key"]
        yield key, int(fields["Size"]), fields.get("ETag") or None


def _parsed_objects(page: dict[str, Any]) -> Iterator[tuple[str, int, str | None]]:
    """``(key, size, etag)`` of a page botocore parsed itself (its body came as no bytes)."""
    for item in page.get("Contents") or ():
        etag = item.get("ETag")
        yield (
            unquote_plus(str(item["Key"]))
            if page.get("EncodingType") == "url"
            else str(item["Key"]),
            int(item["Size"]),
            str(etag) if etag else None,
        )


def _no_expect_header(request: Any, **kwargs: Any) -> None:
    """Drop a request's ``Expect: 100-continue`` (a botocore ``before-sign`` handler)."""
    del request.headers["Expect"]
