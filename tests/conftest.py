"""Fixtures shared by the unit and property tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from shardstream.format.encodings import base as encoding_base
from shardstream.storage import obstore_client


@pytest.fixture
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let a test register encodings without leaking them into other tests."""
    monkeypatch.setattr(encoding_base, "_factories", dict(encoding_base._factories))
    monkeypatch.setattr(encoding_base, "_instances", dict(encoding_base._instances))


@pytest.fixture(autouse=True, scope="session")
def private_cache_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Keep the tests' default caches (and datasets read in place) out of the user's own."""
    root = tmp_path_factory.mktemp("shardstream-cache")
    os.chmod(root, 0o700)  # the default cache root must be the user's alone
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SHARDSTREAM_CACHE_DIR", str(root))
        yield


@pytest.fixture(autouse=True)
def obstore_not_left_to_children() -> Iterator[None]:
    """A test's loader that forks workers keeps this process off obstore for the test alone."""
    yield
    obstore_client._FORKING_PID = None
