"""dataset.stream_registry: ``StreamingDataset(stream_name=..., stream_config=...)``.

The reference's contract: without ``streams``, the dataset builds its one stream as
``streams_registry.get(stream_name)(**stream_config, remote=..., local=..., split=...,
download_retry=..., download_timeout=..., validate_hash=..., keep_zip=...)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from tests.streaming_data import write_dataset

import shardstream
from shardstream import Stream, StreamingDataset
from shardstream.dataset.stream_registry import StreamRegistry, streams_registry
from shardstream.errors import ConfigurationError

SAMPLES = 24


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("remote") / "ds", SAMPLES)


@pytest.fixture(autouse=True)
def clean_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test registers into a copy: the process-wide registry is left as it was."""
    monkeypatch.setattr(streams_registry, "_factories", streams_registry.get_all())


class Rooted(Stream):
    """A stream whose remote is ``root/name``: a config argument the dataset does not know."""

    seen: ClassVar[dict[str, Any]] = {}

    def __init__(self, *, root: str, name: str, **kwargs: Any) -> None:
        Rooted.seen = dict(kwargs)
        super().__init__(**{**kwargs, "remote": f"{root}/{name}"})


def test_the_default_name_builds_a_plain_stream(remote: Path, tmp_path: Path):
    ds = StreamingDataset(remote=str(remote), local=str(tmp_path / "c"), batch_size=4,
                          stream_name="stream", stream_config=None)  # fmt: skip
    assert type(ds.streams[0]) is Stream
    assert sorted(int(s["id"]) for s in ds) == list(range(SAMPLES))
    assert shardstream.streams_registry is streams_registry
    assert streams_registry.get("stream") is Stream


def test_a_registered_subclass_is_built_with_the_config_and_the_dataset_arguments(
    remote: Path, tmp_path: Path
):
    streams_registry.register("rooted", func=Rooted)
    config = {"root": str(remote.parent), "name": remote.name, "proportion": None}
    ds = StreamingDataset(local=str(tmp_path / "c"), download_retry=4, batch_size=4,
                          stream_name="rooted", stream_config=config)  # fmt: skip
    assert isinstance(ds.streams[0], Rooted)
    assert sorted(int(s["id"]) for s in ds) == list(range(SAMPLES))
    assert Rooted.seen == {
        "proportion": None, "remote": None, "local": str(tmp_path / "c"), "split": None,
        "download_retry": 4, "download_timeout": 60, "validate_hash": None, "keep_zip": False,
    }  # fmt: skip
    assert config == {"root": str(remote.parent), "name": remote.name, "proportion": None}


def test_the_decorator_form_and_builder_functions_register_too(remote: Path, tmp_path: Path):
    @streams_registry.register("built")
    def build(**kwargs: Any) -> Stream:
        return Stream(**{**kwargs, "remote": str(remote)})

    assert build.__name__ == "build"  # the decorator hands the function back
    ds = StreamingDataset(local=str(tmp_path / "c"), batch_size=4, stream_name="built")
    assert ds.num_samples == SAMPLES
    assert "built" in streams_registry
    assert "built" in repr(streams_registry)


def test_unknown_names_and_foreign_classes_are_refused_saying_what_to_do(tmp_path: Path):
    with pytest.raises(ConfigurationError, match=r"registered: stream\).*register\('nope'") as info:
        StreamingDataset(local=str(tmp_path), stream_name="nope")
    assert isinstance(info.value, ValueError)  # the reference's RegistryError is one

    class NotAStream:
        def __init__(self, **kwargs: Any) -> None:
            pass

    with pytest.raises(ConfigurationError, match=r"subclass of shardstream\.Stream"):
        streams_registry.register("foreign", func=NotAStream)
    streams_registry.register("odd", func=lambda **kwargs: NotAStream())
    with pytest.raises(ConfigurationError, match="built a NotAStream"):
        StreamingDataset(local=str(tmp_path), stream_name="odd")
    with pytest.raises(ConfigurationError, match="non-empty string"):
        StreamRegistry().register("", func=Stream)


def test_config_the_dataset_overrides_and_names_beside_streams_are_refused(
    remote: Path, tmp_path: Path
):
    # The reference silently replaces these with the dataset's own (None) values.
    with pytest.raises(ConfigurationError, match=r"stream_config names \['remote'\]"):
        StreamingDataset(local=str(tmp_path), stream_config={"remote": str(remote)})
    with pytest.raises(ConfigurationError, match="build each Stream yourself"):
        StreamingDataset(streams=[Stream(remote=str(remote))], stream_name="other")
    # What LLM Foundry passes beside streams: the defaults, accepted.
    ds = StreamingDataset(streams=[Stream(remote=str(remote), local=str(tmp_path / "c"))],
                          stream_name="stream", stream_config=None, batch_size=4)  # fmt: skip
    assert ds.num_samples == SAMPLES
