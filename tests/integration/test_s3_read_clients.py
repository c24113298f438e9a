"""S3Store's read clients against SeaweedFS: obstore by default, botocore or plain when asked.

The same credential chain (variables, profiles, refreshable credentials), the same region
(a bucket in another region found from the server's answer), the same errors with no secret in
them or in the logs, and DataLoader workers under ``fork``, ``spawn`` and ``forkserver``. The
plain client (the standard library's) serves where its settings allow (static keys) and hands
the rest to botocore.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from tests.writer_samples import COLUMNS, sample

from shardstream import MDSWriter, StreamingDataLoader, StreamingDataset
from shardstream.errors import CredentialsError, ObjectNotFoundError, StorageError
from shardstream.storage import S3Store, _aws_chain
from shardstream.storage.obstore_client import ObstoreClient
from shardstream.storage.plain_s3 import PlainS3Client

from .conftest import S3Server
from .region_proxy import RegionProxy
from .tls_proxy import TLSProxy

pytestmark = pytest.mark.s3

CLIENTS = ["obstore", "botocore", "plain"]


@pytest.fixture(params=CLIENTS)
def client(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``SHARDSTREAM_S3_CLIENT`` for the test; a fresh botocore session (no kept chain)."""
    monkeypatch.setenv("SHARDSTREAM_S3_CLIENT", request.param)
    monkeypatch.setattr(_aws_chain, "SESSIONS", _aws_chain.Sessions())
    return str(request.param)


def _seeded(server: S3Server, tmp_path: Path, data: bytes = b"0123456789") -> str:
    """A fresh URL holding ``k.bin``, written with the server's own keys."""
    url = server.url("clients")
    source = tmp_path / "seed.bin"
    source.write_bytes(data)
    S3Store(url, key=server.key, secret=server.secret).put_file(str(source), "k.bin")
    return url


def _reads_through(store: S3Store, client: str, *, static: bool = True) -> None:
    """``client`` served the reads (``static``: keys the plain client can sign with)."""
    if client == "obstore":
        assert isinstance(store._obstore, ObstoreClient)
        assert store._client is None  # botocore's reading client was never made
    elif client == "plain" and static:
        assert isinstance(store._plain, PlainS3Client)
        assert store._obstore is None
        assert store._client is None
    else:  # botocore, asked or as the plain client's stand-in
        assert store._obstore is None
        assert store._client is not None
        assert not isinstance(store._plain, PlainS3Client)


def _client_of(agent: str) -> str:
    """Which client sent a request, from its ``User-Agent``."""
    if "Botocore" in agent:
        return "botocore"
    return "plain" if agent.startswith("shardstream") else "obstore"


def _no_aws_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))


# --- credentials ----------------------------------------------------------------------------------


def test_credentials_from_a_profile_file(
    s3_env: S3Server, client: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A profile in ``~/.aws/credentials`` (which obstore cannot read) serves both clients."""
    url = _seeded(s3_env, tmp_path)
    _no_aws_keys(monkeypatch, tmp_path)
    (tmp_path / "aws-credentials").write_text(
        f"[reader]\naws_access_key_id = {s3_env.key}\naws_secret_access_key = {s3_env.secret}\n"
    )
    monkeypatch.setenv("AWS_PROFILE", "reader")
    store = S3Store(url)
    assert store.get_range("k.bin", 1, 4) == b"123"
    assert store.info("k.bin").size == 10
    _reads_through(store, client, static=False)


def test_refreshable_credentials_keep_refreshing(
    s3_env: S3Server, client: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A profile's ``credential_process`` whose credentials expire soon is asked again.

    botocore refreshes credentials that expire within minutes whenever they are asked for;
    obstore asks its provider again before the expiry it was given. Each read then runs the
    process anew, under both clients.
    """
    url = _seeded(s3_env, tmp_path)
    _no_aws_keys(monkeypatch, tmp_path)
    calls = tmp_path / "calls"
    script = tmp_path / "credentials.py"
    script.write_text(
        "import datetime, json, sys\n"
        f"open({str(calls)!r}, 'a').write('x')\n"
        "soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=2)\n"
        f"print(json.dumps({{'Version': 1, 'AccessKeyId': {s3_env.key!r}, "
        f"'SecretAccessKey': {s3_env.secret!r}, 'Expiration': soon.isoformat()}}))\n"
    )
    (tmp_path / "aws-config").write_text(
        f"[profile rotating]\ncredential_process = {sys.executable} {script}\n"
    )
    monkeypatch.setenv("AWS_PROFILE", "rotating")
    store = S3Store(url)
    for _ in range(3):
        assert store.get_range("k.bin", 0, 2) == b"01"
    _reads_through(store, client, static=False)
    assert len(calls.read_text()) >= 3  # asked again as they near their expiry


def test_refused_credentials_name_the_url_and_never_show_a_secret(
    s3_env: S3Server,
    client: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = _seeded(s3_env, tmp_path)
    secret, token = "wrong-secret-0f1e2d3c4b5a", "session-token-9a8b7c6d5e4f"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_SESSION_TOKEN", token)
    caplog.set_level(logging.DEBUG)  # every logger, botocore's and urllib3's too
    store = S3Store(url)
    for call in (lambda: store.get_range("k.bin", 0, 1), lambda: store.get_bytes("k.bin"),
                 lambda: store.info("k.bin")):  # fmt: skip
        with pytest.raises(CredentialsError) as caught:
            call()
        text = str(caught.value)
        assert store.url("k.bin") in text
        assert "AWS_ACCESS_KEY_ID" in text  # says what to set
        chain: BaseException | None = caught.value
        while chain is not None:
            assert secret not in f"{chain!r} {chain}"
            assert token not in f"{chain!r} {chain}"
            chain = chain.__cause__ or chain.__context__
    # botocore's own DEBUG log prints a request's headers, the session token among them: the
    # old path's, beyond shardstream's reach. obstore's path logs nothing of its requests.
    records = [r for r in caplog.records if client != "botocore" or r.name.startswith("shard")]
    logged = "\n".join(f"{record.getMessage()} {record.args}" for record in records)
    assert secret not in logged
    assert token not in logged


def test_no_credentials_anywhere_says_what_to_set(
    s3_env: S3Server, client: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _seeded(s3_env, tmp_path)
    _no_aws_keys(monkeypatch, tmp_path)
    store = S3Store(url)
    with pytest.raises(CredentialsError, match="AWS_PROFILE") as caught:
        store.get_range("k.bin", 0, 1)
    assert store.url("k.bin") in str(caught.value)


def test_errors_are_the_same_classes_naming_the_url(
    s3_env: S3Server, client: str, tmp_path: Path
) -> None:
    store = S3Store(_seeded(s3_env, tmp_path))
    with pytest.raises(ObjectNotFoundError, match=r"s3://\S+/none\.bin"):
        store.get_range("none.bin", 0, 1)
    with pytest.raises(ObjectNotFoundError, match=r"s3://\S+/none\.bin"):
        store.get_bytes_info("none.bin")
    with pytest.raises(StorageError, match=r"s3://\S+/k\.bin") as past:
        store.get_range("k.bin", 5, 11)
    assert not isinstance(past.value, (ObjectNotFoundError, CredentialsError))
    _reads_through(store, client)


def test_the_ca_bundle_botocore_trusts_is_trusted(
    s3_env: S3Server, client: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AWS_CA_BUNDLE`` names the CA of an ``https://`` endpoint, for both clients alike."""
    url = _seeded(s3_env, tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    with TLSProxy(int(s3_env.endpoint.rsplit(":", 1)[1]), tmp_path) as proxy:
        monkeypatch.setenv("AWS_CA_BUNDLE", str(proxy.ca_file))
        store = S3Store(url, endpoint_url=proxy.endpoint)
        assert store.get_range("k.bin", 0, 3) == b"012"
        assert store.info("k.bin").size == 10
        _reads_through(store, client)
        with TLSProxy(int(s3_env.endpoint.rsplit(":", 1)[1]), other) as stranger:
            monkeypatch.setenv("AWS_CA_BUNDLE", str(stranger.ca_file))  # another CA
            refused = S3Store(url, endpoint_url=proxy.endpoint)
            with pytest.raises(StorageError, match=r"s3://\S+/k\.bin"):
                refused.get_range("k.bin", 0, 3)


# --- region ---------------------------------------------------------------------------------------


@pytest.fixture
def elsewhere(s3_env: S3Server) -> Iterator[RegionProxy]:
    """The server, answering as AWS does for a bucket in ``eu-west-3``."""
    proxy = RegionProxy(int(s3_env.endpoint.rsplit(":", 1)[1]), "eu-west-3")
    with proxy:
        yield proxy


def test_a_bucket_in_another_region_is_found_from_the_servers_answer(
    s3_env: S3Server, client: str, tmp_path: Path, elsewhere: RegionProxy
) -> None:
    """Signed for ``us-east-1``, refused with the bucket's region, read there: as botocore does."""
    url = _seeded(s3_env, tmp_path)
    store = S3Store(url, endpoint_url=elsewhere.endpoint)
    assert store.get_range("k.bin", 2, 5) == b"234"
    assert elsewhere.redirected == 1  # the first request, once
    assert store.get_bytes("k.bin") == b"0123456789"
    assert store.info("k.bin").size == 10
    assert elsewhere.redirected == 1  # later ones go to the right region at once
    _reads_through(store, client)
    if client == "obstore":  # no credential in the question (an unsigned HeadBucket)
        asked = [seen for seen in elsewhere.agents if seen[0] == "HEAD" and "k.bin" not in seen[1]]
        assert len(asked) == 1
        again = S3Store(url, endpoint_url=elsewhere.endpoint)
        assert again.get_range("k.bin", 0, 1) == b"0"
        assert elsewhere.redirected == 1  # the process remembers the bucket's region


def test_reads_in_many_threads_move_to_the_buckets_region_once(
    s3_env: S3Server, tmp_path: Path, elsewhere: RegionProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every read refused for the wrong region at once succeeds; the region is asked once."""
    monkeypatch.setenv("SHARDSTREAM_S3_CLIENT", "obstore")
    url = _seeded(s3_env, tmp_path)
    store = S3Store(url, endpoint_url=elsewhere.endpoint)
    with ThreadPoolExecutor(8) as pool:
        reads = list(pool.map(lambda start: store.get_range("k.bin", start, start + 1), range(8)))
    assert reads == [bytes([48 + start]) for start in range(8)]
    asked = [seen for seen in elsewhere.agents if seen[0] == "HEAD" and "k.bin" not in seen[1]]
    assert len(asked) == 1


def test_an_explicit_region_is_signed_for_without_a_redirect(
    s3_env: S3Server, client: str, tmp_path: Path, elsewhere: RegionProxy
) -> None:
    url = _seeded(s3_env, tmp_path)
    store = S3Store(url, endpoint_url=elsewhere.endpoint, region="eu-west-3")
    assert store.get_range("k.bin", 0, 3) == b"012"
    assert elsewhere.redirected == 0


# --- DataLoader workers ---------------------------------------------------------------------------


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_dataloader_workers_read_under_every_start_method(
    s3_env: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    elsewhere: RegionProxy,
    context: str,
) -> None:
    """Each worker builds its own client; a forked one whose parent used obstore, the plain one.

    The main process reads through obstore before the workers start. Spawned and forkserver
    workers read through obstore too; forked ones through the standard library's client, as
    obstore's runtime does not survive ``fork()`` (a request there would hang).
    """
    monkeypatch.delenv("SHARDSTREAM_S3_CLIENT", raising=False)  # the default
    url = s3_env.url(f"loader-{context}")
    with MDSWriter(out=url, columns=COLUMNS, size_limit=300) as writer:
        for i in range(24):
            writer.write(sample(i))
    monkeypatch.setenv("S3_ENDPOINT_URL", elsewhere.endpoint)  # the workers' endpoint too
    main = S3Store(url, region="eu-west-3")
    assert json.loads(main.get_bytes("index.json"))["shards"]  # obstore's runtime now runs here
    assert isinstance(main._obstore, ObstoreClient)
    elsewhere.agents.clear()
    dataset = StreamingDataset(remote=url, local=str(tmp_path / "cache"), batch_size=4)
    loader = StreamingDataLoader(dataset, batch_size=4, num_workers=2, timeout=120,
                                 multiprocessing_context=context)  # fmt: skip
    ids = sorted(int(i) for batch in loader for i in batch["id"])
    assert ids == list(range(24))
    shard_reads = [agent for method, path, agent in elsewhere.agents
                   if method == "GET" and "shard." in path]  # fmt: skip
    assert shard_reads
    clients = {_client_of(agent) for agent in shard_reads}
    assert clients == ({"plain"} if context == "fork" else {"obstore"})


_LOADER_IN_A_FRESH_PROCESS = """
import sys
from shardstream import StreamingDataLoader, StreamingDataset
dataset = StreamingDataset(remote=sys.argv[1], local=sys.argv[2], batch_size=4)
loader = StreamingDataLoader(dataset, batch_size=4, num_workers=2, timeout=120,
                             multiprocessing_context="fork")
ids = sorted(int(i) for batch in loader for i in batch["id"])
assert not [name for name in sys.modules if name.startswith("botocore")], "botocore imported"
print(ids)
"""


def test_forked_workers_of_a_loader_read_through_obstore(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, elsewhere: RegionProxy
) -> None:
    """A loader that forks its workers keeps its process off obstore, so that they can use it.

    In a fresh interpreter (this one has started obstore's runtime in earlier tests): the main
    process reads the index through the standard library's client, never importing botocore,
    and every worker's shard read goes through obstore.
    """
    monkeypatch.delenv("SHARDSTREAM_S3_CLIENT", raising=False)  # the default
    url = s3_env.url("loader-fresh")
    with MDSWriter(out=url, columns=COLUMNS, size_limit=300) as writer:
        for i in range(24):
            writer.write(sample(i))
    monkeypatch.setenv("S3_ENDPOINT_URL", elsewhere.endpoint)
    elsewhere.agents.clear()
    done = subprocess.run(
        [sys.executable, "-c", _LOADER_IN_A_FRESH_PROCESS, url, str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == list(range(24))

    def clients(part: str) -> set[str]:
        gets = [agent for method, path, agent in elsewhere.agents
                if method == "GET" and part in path]  # fmt: skip
        return {_client_of(agent) for agent in gets}

    assert clients("index.json") == {"plain"}  # the main process's (workers inherit it)
    assert clients("shard.") == {"obstore"}  # the workers'
    assert clients("list-type=2") <= {"plain"}  # the start's listing, if it ran before the end


# --- start-up -------------------------------------------------------------------------------------

_READ_WITHOUT_BOTOCORE = """
import sys
from shardstream.storage import S3Store
store = S3Store(sys.argv[1])
assert store.get_range("k.bin", 0, 3) == b"012"
assert store.info("k.bin").size == 10
assert store.get_bytes_info("k.bin")[0] == b"0123456789"
print(sorted(name for name in sys.modules if name.split(".")[0] in ("botocore", "s3fs")))
"""


def test_reading_with_keys_from_the_variables_imports_no_botocore(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys in ``AWS_*`` and no config file: obstore reads, and botocore is never imported.

    Importing botocore and making its session cost more CPU than the rest of a client's start.
    """
    monkeypatch.delenv("SHARDSTREAM_S3_CLIENT", raising=False)
    url = _seeded(s3_env, tmp_path)
    done = subprocess.run([sys.executable, "-c", _READ_WITHOUT_BOTOCORE, url],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
