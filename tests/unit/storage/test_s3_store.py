"""S3Store without a server: URL parsing, configuration, and that construction does no I/O."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

import pytest
from tests.forked import in_forked_child

from shardstream import config
from shardstream.errors import ConfigurationError, MissingDependencyError
from shardstream.storage import S3Store, _aws_chain, open_store, s3
from shardstream.storage._obstore_s3 import S3Settings
from shardstream.storage.obstore_client import ObstoreClient


def test_open_store_gives_an_s3_store_without_io(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("S3_ENDPOINT_URL", raising=False)
    store = open_store("s3://bucket/some/prefix/")
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix, store.endpoint_url) == ("bucket", "some/prefix", None)
    assert store.url("shard.00000.mds") == "s3://bucket/some/prefix/shard.00000.mds"
    assert store._fs is None  # nothing connected yet


def test_bucket_root_urls():
    store = S3Store("s3://bucket", endpoint_url="http://127.0.0.1:1")
    assert store.url("index.json") == "s3://bucket/index.json"
    assert store.url("") == "s3://bucket"


def test_endpoint_comes_from_the_argument_or_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("S3_ENDPOINT_URL", "http://127.0.0.1:9")
    assert S3Store("s3://b/p").endpoint_url == "http://127.0.0.1:9"
    assert S3Store("s3://b/p", endpoint_url="http://127.0.0.1:8").endpoint_url == (
        "http://127.0.0.1:8"
    )


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"S3_ENDPOINT_URL": "  "}, None),
        ({"S3_ENDPOINT_URL": "http://h:1"}, "http://h:1"),
    ],
)
def test_s3_endpoint_url(environ: dict[str, str], expected: str | None):
    assert config.s3_endpoint_url(environ) == expected


@pytest.mark.parametrize("url", ["s3://", "s3:///prefix", "gs://b/p", "s3://b/p?x=1"])
def test_bad_urls(url: str):
    with pytest.raises(ConfigurationError, match="s3://"):
        S3Store(url)


def test_key_and_secret_go_together():
    with pytest.raises(ConfigurationError, match="both key and secret"):
        S3Store("s3://b/p", key="k")


def test_repr_and_urls_hide_the_secret():
    hush = "a-test-secret"
    store = S3Store("s3://b/p", endpoint_url="http://127.0.0.1:1", key="k", secret=hush)
    assert hush not in repr(store)
    assert hush not in store.url("x")


@pytest.mark.parametrize("key", ["/abs", "../up", "a/../../b"])
def test_keys_must_stay_under_the_root(key: str):
    with pytest.raises(ConfigurationError, match="relative"):
        S3Store("s3://b/p", endpoint_url="http://127.0.0.1:1").get_bytes(key)


HUSH = "not-a-real-secret"  # a placeholder


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, frozenset()),
        ({"SHARDSTREAM_S3_REQUESTER_PAYS": " "}, frozenset()),
        ({"SHARDSTREAM_S3_REQUESTER_PAYS": "a, b,,c "}, frozenset({"a", "b", "c"})),
    ],
)
def test_s3_requester_pays_buckets(environ: dict[str, str], expected: frozenset[str]):
    assert config.s3_requester_pays_buckets(environ) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", False), ("0", False), ("no", False), ("1", True), ("TRUE", True), (" yes ", True)],
)
def test_s3_unsigned(text: str, expected: bool):
    assert config.s3_unsigned({"SHARDSTREAM_S3_UNSIGNED": text}) is expected
    assert config.s3_unsigned({}) is False


def test_s3_unsigned_refuses_a_typo():
    with pytest.raises(ConfigurationError, match="SHARDSTREAM_S3_UNSIGNED='maybe'"):
        config.s3_unsigned({"SHARDSTREAM_S3_UNSIGNED": "maybe"})


def test_requester_pays_comes_from_the_argument_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setenv("SHARDSTREAM_S3_REQUESTER_PAYS", "paid,other")
    assert S3Store("s3://paid/p").requester_pays is True
    assert S3Store("s3://free/p").requester_pays is False
    assert S3Store("s3://paid/p", requester_pays=False).requester_pays is False
    assert S3Store("s3://free/p", requester_pays=True).requester_pays is True


def test_anonymous_access_comes_from_the_argument_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setenv("SHARDSTREAM_S3_UNSIGNED", "1")
    assert S3Store("s3://b/p").anon is True
    assert S3Store("s3://b/p", anon=False).anon is False
    assert S3Store("s3://b/p", key="k", secret=HUSH).anon is False  # explicit keys sign
    monkeypatch.setenv("SHARDSTREAM_S3_UNSIGNED", "0")
    assert S3Store("s3://b/p").anon is False
    assert S3Store("s3://b/p", anon=True).anon is True


def test_anonymous_access_takes_no_keys():
    with pytest.raises(ConfigurationError, match="anon=True"):
        S3Store("s3://b/p", anon=True, key="k", secret=HUSH)


@pytest.mark.parametrize(("connect", "read"), [(0.0, 60.0), (10.0, -1.0)])
def test_timeouts_must_be_positive(connect: float, read: float):
    with pytest.raises(ConfigurationError, match="timeout"):
        S3Store("s3://b/p", connect_timeout=connect, read_timeout=read)


def test_the_client_gets_timeouts_options_and_no_retries_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.delenv("SHARDSTREAM_S3_UNSIGNED", raising=False)
    store = S3Store(
        "s3://b/p",
        endpoint_url="http://127.0.0.1:1",
        anon=True,
        requester_pays=True,
        connect_timeout=3,
        read_timeout=7,
    )
    filesystem = store._filesystem()  # creating the client sends no request
    assert filesystem.anon is True
    assert filesystem.req_kw == {"RequestPayer": "requester"}
    assert filesystem.retries == 1
    assert filesystem.config_kwargs["connect_timeout"] == 3
    assert filesystem.config_kwargs["read_timeout"] == 7
    assert filesystem.config_kwargs["retries"]["max_attempts"] == 0
    assert filesystem.config_kwargs["s3"] == {"addressing_style": "path"}
    reader = store._reader()  # reads go through botocore's client, configured alike
    settings = reader.meta.config
    assert (settings.connect_timeout, settings.read_timeout) == (3, 7)
    assert settings.retries["total_max_attempts"] == 1
    assert settings.signature_version is importlib.import_module("botocore").UNSIGNED
    assert settings.s3 == {"addressing_style": "path"}
    assert reader.meta.region_name == "us-east-1"
    assert reader.meta.endpoint_url == "http://127.0.0.1:1"


@pytest.mark.parametrize(
    "call",
    [
        lambda store: store.get_range("k", 5, 2),
        lambda store: store.get_range("k", -1, 2),
    ],
)
def test_bad_ranges_are_refused_before_any_request(call: object):
    store = S3Store("s3://b/p", endpoint_url="http://127.0.0.1:1")
    with pytest.raises(ConfigurationError, match="byte range"):
        call(store)  # type: ignore[operator]
    assert store._fs is None
    assert store._client is None


def test_an_empty_range_needs_no_request():
    store = S3Store("s3://b/p", endpoint_url="http://127.0.0.1:1")
    assert store.get_range("k", 3, 3) == b""
    assert (store._fs, store._client) == (None, None)


def test_open_store_passes_options_to_s3():
    store = open_store("s3://b/p", endpoint_url="http://127.0.0.1:1", read_timeout=5, anon=True)
    assert isinstance(store, S3Store)
    assert (store.read_timeout, store.anon) == (5, True)


def test_a_listing_page_botocore_parsed_itself_still_lists_its_objects():
    # A page whose body reached botocore as no bytes (so no raw XML was kept) is read from
    # botocore's own parse, its URL-encoded keys decoded as the raw route decodes them.
    from shardstream.storage.s3_listing import parsed_objects as _parsed_objects

    page = {
        "EncodingType": "url",
        "Contents": [{"Key": "a+b%2Fc.mds", "Size": 7, "ETag": '"e1"'}, {"Key": "d", "Size": 0}],
    }
    assert list(_parsed_objects(page)) == [("a b/c.mds", 7, '"e1"'), ("d", 0, None)]
    plain = {"Contents": [{"Key": "a+b", "Size": 1}]}
    assert list(_parsed_objects(plain)) == [("a+b", 1, None)]


class SessionSpy:
    """Counts the botocore sessions made, through botocore's own ``get_session``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import botocore.session  # type: ignore[import-untyped]

        self.made = 0
        real = botocore.session.get_session

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.made += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(botocore.session, "get_session", counted)
        monkeypatch.setattr(
            _aws_chain, "SESSIONS", _aws_chain.Sessions()
        )  # none kept from other tests


def signing_key(store: S3Store) -> str:
    """The access key the store's reading client signs with (botocore keeps it on the signer)."""
    credentials = store._reader()._request_signer._credentials
    return str(credentials.get_frozen_credentials().access_key)


@pytest.fixture
def aws_chain(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role looked for
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "first-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "first-secret")


def test_two_stores_build_their_clients_from_one_session(
    monkeypatch: pytest.MonkeyPatch, aws_chain: None
):
    spy = SessionSpy(monkeypatch)
    first = S3Store("s3://bucket/a", endpoint_url="http://127.0.0.1:1")
    second = S3Store("s3://other/b", endpoint_url="http://127.0.0.1:1")
    clients = {id(first._reader()), id(second._reader()), id(first._reader())}
    assert len(clients) == 2  # a client per store, kept by it
    assert spy.made == 1
    assert signing_key(first) == signing_key(second) == "first-key"


def test_a_changed_credential_variable_gets_a_new_session(
    monkeypatch: pytest.MonkeyPatch, aws_chain: None
):
    spy = SessionSpy(monkeypatch)
    assert signing_key(S3Store("s3://bucket", endpoint_url="http://127.0.0.1:1")) == "first-key"
    # botocore keeps a session's resolved credentials: a session kept across this change
    # would sign with the old key.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "second-key")
    assert signing_key(S3Store("s3://bucket", endpoint_url="http://127.0.0.1:1")) == "second-key"
    assert spy.made == 2
    assert signing_key(S3Store("s3://bucket", endpoint_url="http://127.0.0.1:1")) == "second-key"
    assert spy.made == 2


def test_an_edited_credentials_file_gets_a_new_session(
    monkeypatch: pytest.MonkeyPatch, aws_chain: None, tmp_path: Any
):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    credentials = tmp_path / "credentials"
    credentials.write_text("[default]\naws_access_key_id = file-one\naws_secret_access_key = s\n")
    spy = SessionSpy(monkeypatch)
    assert signing_key(S3Store("s3://bucket", endpoint_url="http://127.0.0.1:1")) == "file-one"
    credentials.write_text("[default]\naws_access_key_id = file-two-x\naws_secret_access_key = s\n")
    assert signing_key(S3Store("s3://bucket", endpoint_url="http://127.0.0.1:1")) == "file-two-x"
    assert spy.made == 2


def test_explicit_credentials_win_over_the_kept_session(
    monkeypatch: pytest.MonkeyPatch, aws_chain: None
):
    spy = SessionSpy(monkeypatch)
    chained = S3Store("s3://bucket", endpoint_url="http://127.0.0.1:1")
    explicit = S3Store("s3://bucket", endpoint_url="http://127.0.0.1:1", key="mine", secret="s")  # noqa: S106
    assert (signing_key(chained), signing_key(explicit)) == ("first-key", "mine")
    assert signing_key(S3Store("s3://bucket", endpoint_url="http://127.0.0.1:1")) == "first-key"
    assert spy.made == 1


def test_a_forked_child_builds_its_own_client_from_the_inherited_session(
    monkeypatch: pytest.MonkeyPatch, aws_chain: None
):
    spy = SessionSpy(monkeypatch)
    store = S3Store("s3://bucket", endpoint_url="http://127.0.0.1:1")
    parent_client = id(store._reader())

    def build_in_child() -> str:
        before = spy.made
        child_client = id(store._reader())
        other = S3Store("s3://other", endpoint_url="http://127.0.0.1:1")._reader()
        return f"{spy.made - before} {child_client != parent_client} {other is not None}"

    answer = in_forked_child(build_in_child)
    assert answer == "0 True True"  # no session made, and not the parent's client
    assert spy.made == 1


# --- which client reads, and with what settings (no request is sent) -----------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", "auto"), ("  ", "auto"), ("obstore", "obstore"), (" Botocore ", "botocore")],
)
def test_s3_client(text: str, expected: str):
    assert config.s3_client({"SHARDSTREAM_S3_CLIENT": text}) == expected
    assert config.s3_client({}) == "auto"


def test_s3_client_refuses_another_name():
    with pytest.raises(ConfigurationError, match="SHARDSTREAM_S3_CLIENT='boto'"):
        config.s3_client({"SHARDSTREAM_S3_CLIENT": "boto"})


def test_obstore_reads_by_default_and_botocore_when_asked(
    monkeypatch: pytest.MonkeyPatch, aws_chain: None
):
    monkeypatch.delenv("SHARDSTREAM_S3_CLIENT", raising=False)
    store = S3Store("s3://bucket/p", endpoint_url="http://127.0.0.1:1")
    assert isinstance(store._fast_reader(), ObstoreClient)
    assert store._fast_reader() is store._fast_reader()  # settled once
    monkeypatch.setattr(s3, "installed", lambda: False)
    assert S3Store("s3://bucket/p", endpoint_url="http://127.0.0.1:1")._fast_reader() is None
    monkeypatch.setenv("SHARDSTREAM_S3_CLIENT", "botocore")
    assert S3Store("s3://bucket/p", endpoint_url="http://127.0.0.1:1")._fast_reader() is None
    assert store._client is None  # nothing of botocore's made for deciding


def test_asking_for_obstore_without_it_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, aws_chain: None
):
    monkeypatch.setenv("SHARDSTREAM_S3_CLIENT", "obstore")
    store = S3Store("s3://bucket/p", endpoint_url="http://127.0.0.1:1")
    monkeypatch.setitem(sys.modules, "obstore", None)  # as if not installed
    with pytest.raises(MissingDependencyError, match=r"shardstream\[s3\]"):
        store.get_range("k.bin", 0, 1)


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("AWS_USE_FIPS_ENDPOINT", "true", "FIPS"),
        ("AWS_USE_DUALSTACK_ENDPOINT", "true", "dual-stack"),
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:2", "AWS_ENDPOINT_URL"),
        ("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:2", "AWS_ENDPOINT_URL"),
    ],
)
@pytest.mark.parametrize("asked", ["auto", "obstore"])
def test_what_obstore_lacks_goes_to_botocore_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
    aws_chain: None,
    caplog: pytest.LogCaptureFixture,
    variable: str,
    value: str,
    named: str,
    asked: str,
):
    monkeypatch.setenv("SHARDSTREAM_S3_CLIENT", asked)
    monkeypatch.setenv(variable, value)
    caplog.set_level(logging.DEBUG, logger="shardstream")
    assert S3Store("s3://bucket/p")._fast_reader() is None
    (record,) = [r for r in caplog.records if r.name == "shardstream.storage.s3"]
    assert named in record.getMessage()
    assert "s3://bucket/p" in record.getMessage()
    assert record.levelno == (logging.WARNING if asked == "obstore" else logging.DEBUG)


def test_transfer_acceleration_in_the_profile_goes_to_botocore(
    monkeypatch: pytest.MonkeyPatch, aws_chain: None, tmp_path: Any
):
    (tmp_path / "config").write_text("[default]\ns3 =\n    use_accelerate_endpoint = true\n")
    assert S3Store("s3://bucket/p")._fast_reader() is None
    (tmp_path / "config").write_text("[default]\nregion = eu-north-1\n")
    assert S3Store("s3://bucket/p")._fast_reader() is not None


@pytest.mark.parametrize(
    ("arguments", "variables", "profile", "expected"),
    [
        ({}, {}, "", "us-east-1"),  # as botocore: the global endpoint, then redirects
        ({}, {"AWS_DEFAULT_REGION": "eu-north-1"}, "", "eu-north-1"),
        ({}, {}, "region = ap-south-1\n", "ap-south-1"),
        ({"region": "sa-east-1"}, {"AWS_DEFAULT_REGION": "eu-north-1"}, "", "sa-east-1"),
        ({"endpoint_url": "http://127.0.0.1:1"}, {"AWS_DEFAULT_REGION": "eu-north-1"}, "",
         "us-east-1"),  # a custom endpoint: us-east-1 unless given, as for botocore
    ],
)  # fmt: skip
def test_obstore_signs_for_the_region_botocore_would(
    monkeypatch: pytest.MonkeyPatch,
    aws_chain: None,
    tmp_path: Any,
    arguments: dict[str, str],
    variables: dict[str, str],
    profile: str,
    expected: str,
):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "config").write_text(f"[default]\n{profile}")
    store = S3Store("s3://bucket/p", **arguments)  # type: ignore[arg-type]
    settings = S3Settings(store)
    assert settings.make().config["region"] == expected  # builds the store: no request
    if "endpoint_url" not in arguments:
        assert expected == (
            store._reader().meta.region_name if arguments or variables or profile else expected
        )
