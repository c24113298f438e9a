"""AWS Signature Version 4 for S3 requests, with the standard library alone.

The headers that sign a request with a static key, as botocore computes them for S3: the path
encoded once (S3 does not encode it twice), the query sorted, the ``host``, ``x-amz-date``,
``x-amz-content-sha256`` (and the session token's) headers signed. The signing key is derived
once a day a region, as each is valid for one date.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

__all__ = ["EMPTY_SHA256", "Signer", "canonical_path", "canonical_query"]

#: The SHA-256 of an empty body: what a GET or HEAD signs as its payload.
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_SAFE = "-_.~"  # the characters SigV4 leaves unencoded


def canonical_path(path: str) -> str:
    """``path`` as SigV4 signs it for S3: each segment percent-encoded, the ``/`` kept."""
    return "/".join(quote(segment, safe=_SAFE) for segment in path.split("/"))


def canonical_query(query: Mapping[str, str]) -> str:
    """The query string, sorted by name, names and values encoded as SigV4 signs them."""
    pairs = sorted((quote(k, safe=_SAFE), quote(v, safe=_SAFE)) for k, v in query.items())
    return "&".join(f"{k}={v}" for k, v in pairs)


@dataclass
class Signer:
    """Signs S3 requests for ``region`` with one static key.

    Args:
        access_key: The access key id.
        secret_key: The secret key (never shown: the caller keeps it out of messages).
        token: A session token, sent and signed when given.
        region: The region requests are signed for.
    """

    access_key: str
    secret_key: str
    token: str | None
    region: str

    def __post_init__(self) -> None:
        self._keys: dict[tuple[str, str], bytes] = {}
        self._lock = threading.Lock()

    def headers(
        self,
        method: str,
        host: str,
        path: str,
        query: Mapping[str, str],
        extra: Mapping[str, str],
        now: datetime.datetime | None = None,
    ) -> dict[str, str]:
        """Every header of the request (``extra`` included, signed too), with its signature.

        Args:
            method: ``GET`` or ``HEAD``.
            host: The ``Host`` header as sent (``name:port`` for a port not the scheme's).
            path: The request's path, unencoded (``/bucket/key`` or ``/key``).
            query: The query's names and values, unencoded.
            extra: More headers to send and sign (``Range``, ``If-Match``, ...).
            now: The signing time (default: the clock's, in UTC).
        """
        moment = now or datetime.datetime.now(datetime.timezone.utc)
        stamp = moment.strftime("%Y%m%dT%H%M%SZ")
        day = stamp[:8]
        sent = {"host": host, "x-amz-date": stamp, "x-amz-content-sha256": EMPTY_SHA256}
        if self.token:
            sent["x-amz-security-token"] = self.token
        sent.update((name.lower(), value) for name, value in extra.items())
        names = sorted(sent)
        signed = ";".join(names)
        canonical = "\n".join(
            [
                method,
                canonical_path(path),
                canonical_query(query),
                "".join(f"{name}:{' '.join(sent[name].split())}\n" for name in names),
                signed,
                EMPTY_SHA256,
            ]
        )
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        signature = hmac.new(self._key(day), to_sign.encode(), hashlib.sha256).hexdigest()
        sent["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, "
            f"SignedHeaders={signed}, Signature={signature}"
        )
        return sent

    def _key(self, day: str) -> bytes:
        """The signing key of ``day`` and this region (derived once: four HMACs)."""
        with self._lock:
            key = self._keys.get((day, self.region))
            if key is None:
                key = ("AWS4" + self.secret_key).encode()
                for part in (day, self.region, "s3", "aws4_request"):
                    key = hmac.new(key, part.encode(), hashlib.sha256).digest()
                self._keys = {(day, self.region): key}  # yesterday's is no longer valid
            return key
