"""SigV4 signatures of S3 requests: the standard library's signer against botocore's own."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.storage.sigv4 import EMPTY_SHA256, Signer, canonical_path, canonical_query

botocore_auth = pytest.importorskip("botocore.auth")
from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]  # noqa: E402
from botocore.credentials import Credentials  # type: ignore[import-untyped]  # noqa: E402

NOW = datetime.datetime(2026, 11, 29, 8, 30, 15, tzinfo=datetime.timezone.utc)


def _botocore_headers(
    method: str,
    url: str,
    headers: dict[str, str],
    token: str | None,
    region: str,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, str]:
    monkeypatch.setattr(botocore_auth, "get_current_datetime", lambda: NOW.replace(tzinfo=None))
    request = AWSRequest(method=method, url=url, headers=dict(headers))
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    botocore_auth.S3SigV4Auth(credentials, "s3", region).add_auth(request)
    return {name.lower(): value for name, value in request.headers.items()}


@pytest.mark.parametrize("token", [None, "session-token/+="])
@pytest.mark.parametrize(
    ("path", "query", "extra"),
    [
        ("/bucket/shard.00000.mds", {}, {}),
        ("/bucket/data/index.json", {}, {"Range": "bytes=0-99", "If-Match": '"abc"'}),
        ("/bucket/a b/ü+%.bin", {}, {}),
        (
            "/bucket/",
            {
                "list-type": "2",
                "prefix": "data/x y",
                "start-after": "data/a+b",
                "encoding-type": "url",
                "max-keys": "1000",
            },
            {},
        ),
        ("/bucket/", {"list-type": "2", "continuation-token": "1/AbC+dE=="}, {}),
    ],
)
def test_a_signature_is_botocore_s(
    path: str,
    query: dict[str, str],
    extra: dict[str, str],
    token: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    host = "127.0.0.1:8333"
    target = canonical_path(path) + (f"?{canonical_query(query)}" if query else "")
    expected = _botocore_headers("GET", f"http://{host}{target}", extra, token, "eu-west-3",
                                 monkeypatch)  # fmt: skip
    signer = Signer("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token, "eu-west-3")
    ours = signer.headers("GET", host, path, query, extra, now=NOW)
    assert ours["authorization"] == expected["authorization"]
    assert ours["x-amz-date"] == expected["x-amz-date"]
    assert ours["x-amz-content-sha256"] == EMPTY_SHA256 == expected["x-amz-content-sha256"]
    assert ours.get("x-amz-security-token") == token


def test_the_signing_key_follows_the_day() -> None:
    """A key derived yesterday is not today's: the signature changes with the date."""
    signer = Signer("AKID", "secret", None, "us-east-1")
    today = signer.headers("GET", "h", "/b/k", {}, {}, now=NOW)["authorization"]
    tomorrow = NOW + datetime.timedelta(days=1)
    later = signer.headers("GET", "h", "/b/k", {}, {}, now=tomorrow)["authorization"]
    assert "20261129/us-east-1" in today
    assert "20261130/us-east-1" in later
    assert today.rsplit("=", 1)[1] != later.rsplit("=", 1)[1]
    assert signer.headers("GET", "h", "/b/k", {}, {}, now=NOW)["authorization"] == today


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=30).filter(lambda k: "\x00" not in k))
def test_any_key_signs_as_botocore_signs_it(key: str) -> None:
    """Any key's path, however odd its characters, is encoded as botocore encodes it."""
    monkeypatch = pytest.MonkeyPatch()
    try:
        path = f"/bucket/{key}"
        target = canonical_path(path)
        expected = _botocore_headers("GET", f"http://h{target}", {}, None, "us-east-1",
                                     monkeypatch)  # fmt: skip
    finally:
        monkeypatch.undo()
    ours = Signer("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None, "us-east-1")
    assert (
        ours.headers("GET", "h", path, {}, {}, now=NOW)["authorization"]
        == (expected["authorization"])
    )
