"""A small OCI Object Storage server on 127.0.0.1 for the tests, and its fixtures.

No emulator of OCI Object Storage exists, so this module implements the documented REST calls
that :class:`shardstream.storage.OCIStore` makes, holding objects in memory:

- ``GET /n/{namespace}/b/{bucket}/o/{object}`` (GetObject), with a ``Range: bytes=a-b`` header
  answered by 206 and ``Content-Range``, or 416 when unsatisfiable;
- ``HEAD /n/{namespace}/b/{bucket}/o/{object}`` (HeadObject): ``Content-Length`` and ``ETag``;
- ``PUT /n/{namespace}/b/{bucket}/o/{object}`` (PutObject): a new ``ETag`` each time;
- ``DELETE /n/{namespace}/b/{bucket}/o/{object}`` (DeleteObject): 204, or 404 when missing;
- ``GET /n/{namespace}/b/{bucket}/o?prefix=&start=&startAfter=&limit=&fields=``
  (ListObjects): objects in name order, ``nextStartWith`` when more remain. Pages hold at most
  ``page_size`` objects (3 here), fewer than ``limit``, as the service may return, so paging is
  exercised.

Every request must carry the documented ``Authorization: Signature ...`` header (draft-cavage
HTTP signatures, ``rsa-sha256``) naming the expected ``keyId`` (``tenancy/user/fingerprint``);
the signature is verified against the test's public key over the headers it lists. Anything
else is answered ``401 NotAuthenticated``, as the service does. Errors are the service's JSON
``{"code": ..., "message": ...}``; a missing object is ``404 ObjectNotFound``, a missing bucket
``404 BucketNotFound``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from shardstream.storage.base import ObjectStore

from .loopback import HOST

__all__ = ["FakeOCI", "OCIAccount", "oci_account", "oci_env", "store_factory_oci"]

TENANCY = "ocid1.tenancy.oc1..aaaatestshardstreamtenancy"
USER = "ocid1.user.oc1..aaaatestshardstreamuser"
NAMESPACE = "testns"
BUCKET = "shardstream-test"
PAGE_SIZE = 3

_PARAM = re.compile(r'(\w+)="([^"]*)"')
_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


def fingerprint(key: rsa.RSAPrivateKey) -> str:
    """The OCI fingerprint of a key: MD5 of the DER public key, as colon-separated hex."""
    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    digest = hashlib.md5(der).hexdigest()  # noqa: S324 (the documented fingerprint format)
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


@dataclass
class FakeOCI:
    """The in-memory service; ``start()`` serves it on 127.0.0.1 at a free port."""

    key_id: str
    public_key: rsa.RSAPublicKey
    namespace: str = NAMESPACE
    page_size: int = PAGE_SIZE
    buckets: dict[str, dict[str, tuple[bytes, str]]] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://{HOST}:{self._server.server_address[1]}"

    def start(self) -> None:
        service = self

        class Handler(_Handler):
            fake = service

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def verify(self, method: str, target: str, headers: Any) -> bool:
        """Whether the request's signature names ``key_id`` and verifies (draft-cavage)."""
        authorization = headers.get("Authorization", "")
        if not authorization.startswith("Signature "):
            return False
        params = dict(_PARAM.findall(authorization))
        if params.get("keyId") != self.key_id or params.get("algorithm") != "rsa-sha256":
            return False
        names = params.get("headers", "").split()
        if not {"date", "(request-target)", "host"} <= set(names):
            return False
        lines = []
        for name in names:
            if name == "(request-target)":
                lines.append(f"(request-target): {method.lower()} {target}")
            elif headers.get(name) is None:
                return False
            else:
                lines.append(f"{name}: {headers.get(name)}")
        try:
            self.public_key.verify(
                base64.b64decode(params.get("signature", "")),
                "\n".join(lines).encode(),
                padding.PKCS1v15(),
                hashes.SHA256(),
            )
        except (InvalidSignature, ValueError):
            return False
        return True


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOCI
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        body = b""
        if method == "PUT":
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        fake = self.fake
        fake.requests.append((method, self.path))
        if not fake.verify(method, self.path, self.headers):
            message = "The required information to complete authentication was not provided."
            self._error(401, "NotAuthenticated", message)
            return
        parts = urlsplit(self.path)
        segments = parts.path.split("/")
        # "", "n", namespace, "b", bucket, "o"[, object name with its "/" as %2F]
        if len(segments) < 6 or segments[1] != "n" or segments[3] != "b" or segments[5] != "o":
            self._error(404, "NotFound", f"no such API: {parts.path}")
            return
        namespace, bucket = unquote(segments[2]), unquote(segments[4])
        name = unquote("/".join(segments[6:]))
        with fake.lock:
            objects = fake.buckets.get(bucket) if namespace == fake.namespace else None
            if objects is None:
                message = f"Either the bucket named '{bucket}' does not exist in the namespace "
                self._error(
                    404, "BucketNotFound", message + f"'{namespace}' or you are not allowed"
                )
                return
            if len(segments) == 6:
                if method != "GET":
                    self._error(405, "MethodNotAllowed", "ListObjects is a GET")
                    return
                self._list(objects, parse_qs(parts.query))
            elif method == "PUT":
                etag = uuid.uuid4().hex
                objects[name] = (body, etag)
                self._reply(200, b"", {"ETag": etag, "opc-content-md5": _md5(body)})
            elif name not in objects:
                self._error(404, "ObjectNotFound", f"The object '{name}' was not found")
            elif method == "DELETE":
                del objects[name]
                self._reply(204, b"", {})
            else:
                self._get(method, *objects[name])

    def _get(self, method: str, data: bytes, etag: str) -> None:
        headers = {
            "ETag": etag,
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        wanted = self.headers.get("Range")
        if wanted is None or method == "HEAD":
            self._reply(200, data, headers, length=len(data), send_body=method == "GET")
            return
        match = _RANGE.fullmatch(wanted.strip())
        if match is None or int(match.group(1)) >= len(data):
            headers["Content-Range"] = f"bytes */{len(data)}"
            self._error(416, "InvalidRange", "The requested range is not satisfiable", headers)
            return
        first = int(match.group(1))
        last = min(int(match.group(2)) if match.group(2) else len(data) - 1, len(data) - 1)
        headers["Content-Range"] = f"bytes {first}-{last}/{len(data)}"
        self._reply(206, data[first : last + 1], headers)

    def _list(self, objects: dict[str, tuple[bytes, str]], query: dict[str, list[str]]) -> None:
        prefix = query.get("prefix", [""])[0]
        start = query.get("start", [""])[0]
        after = query.get("startAfter", [None])[0]
        limit = min(int(query.get("limit", ["1000"])[0]), self.fake.page_size)
        fields = set(query.get("fields", ["name"])[0].split(","))
        names = sorted(
            n
            for n in objects
            if n.startswith(prefix) and n >= start and (after is None or n > after)
        )
        page: list[dict[str, Any]] = []
        for name in names[:limit]:
            item: dict[str, Any] = {"name": name}
            if "size" in fields:
                item["size"] = len(objects[name][0])
            if "etag" in fields:
                item["etag"] = objects[name][1]
            page.append(item)
        result: dict[str, Any] = {"objects": page, "prefixes": []}
        if len(names) > limit:
            result["nextStartWith"] = names[limit]
        self._reply(200, json.dumps(result).encode(), {"Content-Type": "application/json"})

    def _error(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        body = json.dumps({"code": code, "message": message}).encode()
        send = self.command != "HEAD"
        self._reply(
            status, body, {"Content-Type": "application/json", **(headers or {})}, send_body=send
        )

    def _reply(
        self,
        status: int,
        body: bytes,
        headers: dict[str, str],
        *,
        length: int | None = None,
        send_body: bool = True,
    ) -> None:
        self.send_response(status)
        self.send_header("opc-request-id", uuid.uuid4().hex)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if send_body:
            self.wfile.write(body)


def _md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()  # noqa: S324


@dataclass(frozen=True)
class OCIAccount:
    """The running fake, and a config file whose DEFAULT profile signs with the right key."""

    server: FakeOCI
    config_file: str
    folder: Path
    key: rsa.RSAPrivateKey

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    def url(self, name: str) -> str:
        """A fresh ``oci://`` URL under the test bucket, unique to one test."""
        return f"oci://{BUCKET}@{NAMESPACE}/{name}-{uuid.uuid4().hex[:8]}"

    def config_with_other_key(
        self, *, same_fingerprint: bool = True, pass_phrase: str | None = None
    ) -> str:
        """A config file signing with a key the server does not know.

        With ``same_fingerprint`` the file claims the right key's fingerprint (so only the
        signature is wrong), else its own (so the ``keyId`` is wrong too). The key is encrypted
        with ``pass_phrase`` when one is given, and the file holds the pass phrase.
        """
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        claimed = self.key if same_fingerprint else None
        folder = self.folder / uuid.uuid4().hex[:8]
        return write_config(folder, key, fingerprint_of=claimed, pass_phrase=pass_phrase)


def write_config(
    folder: Path,
    key: rsa.RSAPrivateKey,
    *,
    fingerprint_of: rsa.RSAPrivateKey | None,
    pass_phrase: str | None = None,
) -> str:
    """Write ``key`` and an OCI config file naming it into ``folder``; return the file's path.

    The fingerprint in the file is that of ``fingerprint_of`` (default: of ``key`` itself).
    """
    folder.mkdir(parents=True, exist_ok=True)
    encryption: serialization.KeySerializationEncryption = serialization.NoEncryption()
    if pass_phrase is not None:
        encryption = serialization.BestAvailableEncryption(pass_phrase.encode())
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, encryption
    )
    (folder / "key.pem").write_bytes(pem)
    (folder / "key.pem").chmod(0o600)
    lines = [
        "[DEFAULT]",
        f"user={USER}",
        f"fingerprint={fingerprint(fingerprint_of or key)}",
        f"key_file={folder / 'key.pem'}",
        f"tenancy={TENANCY}",
        "region=us-ashburn-1",
    ]
    if pass_phrase is not None:
        lines.append(f"pass_phrase={pass_phrase}")
    (folder / "config").write_text("\n".join(lines) + "\n")
    return str(folder / "config")


@pytest.fixture(scope="session")
def oci_account(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OCIAccount]:
    folder = tmp_path_factory.mktemp("oci")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key_id = f"{TENANCY}/{USER}/{fingerprint(key)}"
    server = FakeOCI(key_id=key_id, public_key=key.public_key())
    server.buckets[BUCKET] = {}
    server.start()
    try:
        config_file = write_config(folder / "good", key, fingerprint_of=None)
        yield OCIAccount(server, config_file, folder, key)
    finally:
        server.stop()


@pytest.fixture
def oci_env(
    monkeypatch: pytest.MonkeyPatch, oci_account: OCIAccount, loopback_only: None
) -> OCIAccount:
    """The fake's endpoint and config file in the environment, as a user would set them."""
    monkeypatch.setenv("OCI_ENDPOINT_URL", oci_account.endpoint)
    monkeypatch.setenv("OCI_CONFIG_FILE", oci_account.config_file)
    monkeypatch.delenv("OCI_CLI_PROFILE", raising=False)
    monkeypatch.delenv("OCI_REGION_METADATA", raising=False)
    return oci_account


@pytest.fixture
def store_factory_oci(oci_env: OCIAccount) -> Callable[[], ObjectStore]:
    """A callable giving an :class:`OCIStore` on a fresh, empty prefix of the fake."""
    from shardstream.storage import OCIStore

    def make() -> ObjectStore:
        return OCIStore(oci_env.url("conformance"))

    return make
