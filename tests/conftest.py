"""Fixtures shared by the unit and property tests."""

from __future__ import annotations

import pytest

from shardstream.format.encodings import base as encoding_base


@pytest.fixture
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let a test register encodings without leaking them into other tests."""
    monkeypatch.setattr(encoding_base, "_factories", dict(encoding_base._factories))
    monkeypatch.setattr(encoding_base, "_instances", dict(encoding_base._instances))
