"""Store factories for the conformance suite: ``local``, ``s3`` (each client), ``http``, obstore.

``store_factory_<name>`` returns a callable that gives a fresh, empty dataset root each time.
A read-only backend also provides ``seed_<name>``: ``seed(store, key, data)`` puts an object
behind the store's back.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from shardstream.storage import AzureStore, HTTPStore, LocalStore, ObjectStore, S3Store
from shardstream.storage.obstore_client import ObstoreClient

from .http_server import StaticServer

if TYPE_CHECKING:
    from .conftest import S3Server
    from .servers_gcs_azure import AzureServer

__all__ = [
    "http_server",
    "seed_http",
    "store_factory_http",
    "store_factory_local",
    "store_factory_obstore_azure",
    "store_factory_obstore_s3",
    "store_factory_s3",
    "store_factory_s3_botocore",
    "store_factory_s3_obstore",
    "store_factory_s3_plain",
]

StoreFactory = Callable[[], ObjectStore]
_PROXY_VARIABLES = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


@pytest.fixture
def store_factory_local(tmp_path: Path) -> StoreFactory:
    numbers = itertools.count()
    return lambda: LocalStore(str(tmp_path / f"local-root-{next(numbers)}"))


@pytest.fixture
def store_factory_s3(s3_env: S3Server) -> StoreFactory:
    """S3Store as users get it: its reads through obstore when installed, else botocore."""
    return lambda: S3Store(s3_env.url("conformance"))


@pytest.fixture
def store_factory_s3_obstore(s3_env: S3Server, monkeypatch: pytest.MonkeyPatch) -> StoreFactory:
    """S3Store with its reads through obstore (``SHARDSTREAM_S3_CLIENT=obstore``)."""
    monkeypatch.setenv("SHARDSTREAM_S3_CLIENT", "obstore")
    return lambda: _reading_through(S3Store(s3_env.url("conformance")), "obstore")


@pytest.fixture
def store_factory_s3_botocore(s3_env: S3Server, monkeypatch: pytest.MonkeyPatch) -> StoreFactory:
    """S3Store with its reads through botocore (``SHARDSTREAM_S3_CLIENT=botocore``)."""
    monkeypatch.setenv("SHARDSTREAM_S3_CLIENT", "botocore")
    return lambda: _reading_through(S3Store(s3_env.url("conformance")), "botocore")


@pytest.fixture
def store_factory_s3_plain(s3_env: S3Server, monkeypatch: pytest.MonkeyPatch) -> StoreFactory:
    """S3Store with its reads through the standard library's client (``plain``)."""
    monkeypatch.setenv("SHARDSTREAM_S3_CLIENT", "plain")
    return lambda: _reading_through(S3Store(s3_env.url("conformance")), "plain")


@pytest.fixture
def store_factory_obstore_s3(s3_env: S3Server) -> StoreFactory:
    """The obstore client alone, as a whole store: writes, listings and deletes through it too."""
    return lambda: ObstoreClient.of_s3_store(S3Store(s3_env.url("conformance")))


@pytest.fixture
def store_factory_obstore_azure(azure_env: AzureServer) -> StoreFactory:
    """The obstore client of an Azure store (Azurite), alone, as a whole store."""

    def make() -> ObjectStore:
        store: AzureStore = azure_env.store("conformance")
        return ObstoreClient.of_azure_store(store)

    return make


def _reading_through(store: S3Store, client: str) -> S3Store:
    assert store._read_client == client  # the switch was read, and names this client
    return store


@pytest.fixture(scope="session")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StaticServer]:
    with StaticServer(str(tmp_path_factory.mktemp("http-root"))) as server:
        yield server


@pytest.fixture
def store_factory_http(http_server: StaticServer, monkeypatch: pytest.MonkeyPatch) -> StoreFactory:
    for name in _PROXY_VARIABLES:  # urllib would send requests through a proxy from the env
        monkeypatch.delenv(name, raising=False)

    def make() -> ObjectStore:
        folder = f"root-{uuid.uuid4().hex[:8]}"
        os.makedirs(os.path.join(http_server.root, folder))
        return HTTPStore(f"{http_server.url}/{folder}", timeout=10)

    return make


@pytest.fixture
def seed_http(http_server: StaticServer) -> Callable[[ObjectStore, str, bytes], None]:
    def seed(store: ObjectStore, key: str, data: bytes) -> None:
        assert isinstance(store, HTTPStore)
        folder = store.base.rsplit("/", 1)[1]
        path = os.path.join(http_server.root, folder, *key.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{path}.seed-{uuid.uuid4().hex[:8]}"
        with open(temporary, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)  # a new inode: the etag changes as on a real server

    return seed
