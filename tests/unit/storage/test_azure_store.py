"""AzureStore without a server: one URL parsing for every form, credential settling, no I/O."""

from __future__ import annotations

import pytest

from shardstream import config
from shardstream.errors import ConfigurationError, CredentialsError
from shardstream.storage import AzureStore, open_store
from shardstream.storage.azure import AzureURL, parse_azure_url

KEY = "a2V5LWZvci11bml0LXRlc3RzLTAxMjM0NTY3ODlhYmNkZWY="
ENDPOINT = "http://127.0.0.1:1/acct"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN",
    ):  # fmt: skip
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("azure://data/ds", AzureURL("azure", "data", "ds", netloc="data")),
        ("az://data", AzureURL("az", "data", "", netloc="data")),
        ("AZ://data/a/b/", AzureURL("az", "data", "a/b", netloc="data")),
        ("abfs://data/ds", AzureURL("abfs", "data", "ds", netloc="data")),
        ("abfss://data/ds", AzureURL("abfss", "data", "ds", netloc="data")),
        (
            "abfss://data@acct.dfs.core.windows.net/ds/x",
            AzureURL(
                "abfss", "data", "ds/x", "acct", "core.windows.net",
                "data@acct.dfs.core.windows.net",
            ),
        ),
        (
            "abfs://data@acct.blob.core.chinacloudapi.cn/ds",
            AzureURL(
                "abfs", "data", "ds", "acct", "core.chinacloudapi.cn",
                "data@acct.blob.core.chinacloudapi.cn",
            ),
        ),
        ("azure://$root/ds", AzureURL("azure", "$root", "ds", netloc="$root")),
    ],
)  # fmt: skip
def test_parse_azure_url(url: str, expected: AzureURL):
    assert parse_azure_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "azure://",
        "az:///ds",
        "s3://b/ds",
        "wasb://data/ds",
        "az://Data/ds",  # container names are lower case
        "az://ab/ds",  # and at least 3 characters long
        "az://da--ta/ds",  # without double hyphens
        "az://data/ds?sv=2020",
        "abfss://data@acct.example.com/ds",
    ],
)
def test_bad_urls(url: str):
    with pytest.raises(ConfigurationError, match="Azure"):
        AzureStore(url, account_name="acct", account_key=KEY)


@pytest.mark.parametrize(
    "url",
    [
        "azure://data/ds",
        "az://data/ds/",
        "abfs://data/ds",
        "abfss://data@acct.dfs.core.windows.net/ds",
        "az://data@acct.blob.core.windows.net/ds",
    ],
)
def test_every_form_names_the_same_blob_for_reading_and_writing(url: str):
    # One parsing for the writer's uploads and the reader's downloads: the container is never
    # read two ways (the reference's uploader and downloader disagree on abfs URLs).
    store = open_store(url, account_name="acct", account_key=KEY)
    assert isinstance(store, AzureStore)
    assert (store.bucket, store.prefix, store.account_name) == ("data", "ds", "acct")
    assert store._path("shard.00000.mds") == "data/ds/shard.00000.mds"
    assert store.url("shard.00000.mds").endswith("/ds/shard.00000.mds")
    again = AzureStore(store.url(""), account_name="acct", account_key=KEY)
    assert again._path("index.json") == store._path("index.json")
    assert store._fs is None  # construction did no I/O


def test_the_account_name_comes_from_the_argument_the_url_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
):
    assert AzureStore("az://data/ds", account_name="one").account_name == "one"
    assert AzureStore("abfss://data@two.dfs.core.windows.net/ds").account_name == "two"
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "three")
    assert AzureStore("az://data/ds").account_name == "three"
    assert AzureStore("abfss://data@two.dfs.core.windows.net/ds").account_name == "two"
    with pytest.raises(ConfigurationError, match="differs from the URL's account"):
        AzureStore("abfss://data@two.dfs.core.windows.net/ds", account_name="one")


def test_credentials_come_from_arguments_then_the_environment_then_default(
    monkeypatch: pytest.MonkeyPatch,
):
    assert AzureStore("az://data/ds", account_name="a").credential_source == (
        "DefaultAzureCredential"
    )
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "a")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", KEY)
    assert AzureStore("az://data/ds").credential_source == "AZURE_STORAGE_ACCOUNT_KEY"
    # The key in the environment belongs to its account, not to another one.
    other = AzureStore("az://data/ds", account_name="b")
    assert other.credential_source == "DefaultAzureCredential"
    conn = f"AccountName=c;AccountKey={KEY};BlobEndpoint={ENDPOINT}"
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", conn)
    store = AzureStore("az://data/ds")
    assert (store.credential_source, store.account_name) == ("AZURE_STORAGE_CONNECTION_STRING", "c")
    given = AzureStore("az://data/ds", account_name="a", sas_token="?sv=1&sig=abc")  # noqa: S106
    assert given.credential_source == "the arguments"
    assert given._sas_token == "sv=1&sig=abc"  # noqa: S105


def test_one_kind_of_credentials_and_one_account():
    with pytest.raises(ConfigurationError, match="connection_string and account_key"):
        AzureStore("az://data/ds", connection_string="AccountName=a", account_key=KEY)
    with pytest.raises(ConfigurationError, match=r"account 'a'.*names 'b'"):
        AzureStore(
            "az://data/ds", account_name="b", connection_string=f"AccountName=a;AccountKey={KEY}"
        )
    with pytest.raises(ConfigurationError, match="BlobEndpoint"):
        AzureStore("az://data/ds", connection_string="AccountName=a", endpoint_url=ENDPOINT)


def test_no_account_is_a_credentials_error_on_first_use_naming_the_url():
    store = AzureStore("az://data/ds")
    with pytest.raises(CredentialsError, match=r"az://data/ds.*AZURE_STORAGE_ACCOUNT_NAME"):
        store.exists("index.json")


def test_an_endpoint_with_a_key_or_sas_becomes_a_connection_string():
    keyed = AzureStore("az://data/ds", account_name="a", account_key=KEY, endpoint_url=ENDPOINT)
    options = keyed._filesystem_options()
    assert options["connection_string"] == f"AccountName=a;AccountKey={KEY};BlobEndpoint={ENDPOINT}"
    assert options["anon"] is False
    sovereign = AzureStore("abfss://data@acct.dfs.core.usgovcloudapi.net/ds", credential=object())
    assert sovereign._filesystem_options()["account_host"] == "acct.blob.core.usgovcloudapi.net"
    with pytest.raises(ConfigurationError, match="https://"):
        AzureStore("az://data/ds", account_name="a", endpoint_url=ENDPOINT)._filesystem_options()


def test_secrets_stay_out_of_repr_and_scrubbed_text():
    conn = f"DefaultEndpointsProtocol=https;AccountName=a;AccountKey={KEY}"
    store = AzureStore("az://data/ds", connection_string=conn)
    assert KEY not in repr(store)
    assert store._scrub(f"failed with {conn}") == "failed with ***"
    assert KEY not in store._scrub(f"AccountKey={KEY[:-4]}")  # a key cut short still goes
    signed = AzureStore("az://data/ds", account_name="a", sas_token="sv=2024&sig=SECRETSIG")  # noqa: S106
    assert "SECRETSIG" not in signed._scrub("GET https://a.blob/data?sv=2024&sig=SECRETSIG")
    assert "SECRETSIG" not in signed._scrub("GET https://a.blob/data?sig=SECRETSIG%3D")
    assert KEY not in repr(config.azure_environment({"AZURE_STORAGE_ACCOUNT_KEY": KEY}))


@pytest.mark.parametrize("key", ["/abs", "../up", "a/../../b"])
def test_keys_must_stay_under_the_root(key: str):
    with pytest.raises(ConfigurationError, match="relative"):
        AzureStore("az://data/ds", account_name="a", account_key=KEY).get_bytes(key)


def test_keys_with_url_syntax_are_refused():
    with pytest.raises(ConfigurationError, match="'#'"):
        AzureStore("az://data/ds", account_name="a", account_key=KEY).get_bytes("a#b")


def test_timeouts_reach_adlfs_and_must_be_positive():
    store = AzureStore("az://data/ds", account_name="acct", connect_timeout=3, read_timeout=7)
    options = store._filesystem_options()
    assert (options["connection_timeout"], options["read_timeout"]) == (3.0, 7.0)
    with pytest.raises(ConfigurationError, match="must be positive"):
        AzureStore("az://data/ds", account_name="acct", read_timeout=0)


@pytest.mark.parametrize(
    ("options", "expected_url"),
    [
        ({"account_key": KEY}, "https://acct.blob.core.windows.net/"),
        ({"sas_token": "sv=2024&sig=abc"}, "https://acct.blob.core.windows.net/?sv=2024&sig=abc"),
        ({"anon": True}, "https://acct.blob.core.windows.net/"),
    ],
)
def test_the_client_makes_one_attempt_per_request(options: dict[str, object], expected_url: str):
    # Building the client does no I/O; the SDK's retries are off and the timeouts ours.
    store = AzureStore("az://data/ds", account_name="acct", read_timeout=7, **options)  # type: ignore[arg-type]
    client = store._filesystem().service_client
    assert client.url == expected_url
    assert client._config.retry_policy.total_retries == 0
    conn = f"AccountName=acct;AccountKey={KEY};BlobEndpoint={ENDPOINT}"
    from_string = AzureStore("az://data/ds", connection_string=conn)._filesystem().service_client
    assert from_string._config.retry_policy.total_retries == 0
    assert from_string.url.startswith(ENDPOINT)


@pytest.mark.parametrize("conn", [f"garbage {KEY}", f"AccountKey={KEY}"])
def test_a_malformed_connection_string_is_a_credentials_error_without_it(conn: str):
    store = AzureStore("az://data/ds", connection_string=conn)
    with pytest.raises(CredentialsError, match="AZURE_STORAGE_CONNECTION_STRING") as info:
        store.exists("index.json")  # fails while setting up the client, before any request
    assert "az://data/ds" in str(info.value)
    assert KEY not in str(info.value)
    assert info.value.__cause__ is None


@pytest.mark.parametrize(("text", "expected"), [("", "auto"), (" ADLFS ", "adlfs")])
def test_azure_client(text: str, expected: str):
    assert config.azure_client({"SHARDSTREAM_AZURE_CLIENT": text}) == expected


def test_azure_client_refuses_another_name():
    with pytest.raises(ConfigurationError, match="SHARDSTREAM_AZURE_CLIENT='obstor'"):
        config.azure_client({"SHARDSTREAM_AZURE_CLIENT": "obstor"})
