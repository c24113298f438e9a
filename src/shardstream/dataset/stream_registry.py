"""Which ``Stream`` class a dataset builds its single stream with: ``stream_name=``.

mosaicml-streaming (0.11 and later) builds the stream of ``StreamingDataset(remote=...)`` from
a registry of ``Stream`` classes, ``streaming.base.stream.streams_registry``:
``stream_name`` picks the class and ``stream_config`` adds constructor arguments. This is that
registry, and the normalisation of a dataset's stream arguments into a list of streams.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, overload

from shardstream.dataset.stream import Stream
from shardstream.errors import ConfigurationError

__all__ = ["DATASET_STREAM_ARGUMENTS", "StreamRegistry", "dataset_streams", "streams_registry"]

logger = logging.getLogger(__name__)

StreamFactory = Callable[..., Stream]
F = TypeVar("F", bound=Callable[..., Any])

#: The arguments of ``StreamingDataset`` passed to the constructor of the stream it builds.
DATASET_STREAM_ARGUMENTS = (
    "remote", "local", "split", "download_retry", "download_timeout", "validate_hash", "keep_zip",
)  # fmt: skip


class StreamRegistry:
    """Names for ``Stream`` subclasses, for ``StreamingDataset(stream_name=...)``.

    The reference's ``streams_registry``: without ``streams=``, a dataset builds its one stream
    as ``registry.get(stream_name)(**stream_config, remote=..., local=..., split=...,
    download_retry=..., download_timeout=..., validate_hash=..., keep_zip=...)``. ``"stream"``
    names :class:`~shardstream.Stream`. A registered class subclasses it (or a registered
    function returns one); what a subclass can change is what its constructor passes on: the
    reference's download hooks (``get_shards``, ``_download_file``) are not called here.
    Register in every process that builds a dataset (at import time of your module).

    Example:
        class Bucketed(Stream):
            def __init__(self, *, bucket: str, path: str, **kwargs):
                super().__init__(**{**kwargs, "remote": f"s3://{bucket}/{path}"})

        streams_registry.register("bucketed", func=Bucketed)
        ds = StreamingDataset(stream_name="bucketed", local="/tmp/cache/web", batch_size=8,
                              stream_config={"bucket": "data", "path": "web"})
    """

    def __init__(self) -> None:
        self._factories: dict[str, StreamFactory] = {}

    def __repr__(self) -> str:
        return f"StreamRegistry({sorted(self._factories)})"

    def __contains__(self, name: object) -> bool:
        return name in self._factories

    @overload
    def register(self, name: str, *, func: F) -> F: ...

    @overload
    def register(self, name: str, *, func: None = None) -> Callable[[F], F]: ...

    def register(self, name: str, *, func: F | None = None) -> F | Callable[[F], F]:
        """Register ``func`` under ``name``; without ``func``, a decorator that does.

        Registering a name again replaces its entry, as in the reference.

        Args:
            name: The ``stream_name`` that picks it.
            func: A subclass of :class:`~shardstream.Stream`, or a function returning a Stream.

        Returns:
            ``func`` (or the decorator).

        Raises:
            ConfigurationError: ``name`` is empty, or ``func`` is a class that does not
                subclass :class:`~shardstream.Stream` (or not callable at all).
        """
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"a stream name is a non-empty string, got {name!r}")
        if func is None:
            return lambda decorated: self.register(name, func=decorated)
        if not callable(func) or (isinstance(func, type) and not issubclass(func, Stream)):
            raise ConfigurationError(
                f"cannot register {func!r} as stream {name!r}: register a subclass of "
                "shardstream.Stream (a mosaicml-streaming Stream subclass does not plug in)"
            )
        if name in self._factories and self._factories[name] is not func:
            logger.debug("stream name %r now names %r", name, func)
        self._factories[name] = func
        return func

    def get(self, name: str) -> StreamFactory:
        """What ``name`` names.

        Raises:
            ConfigurationError: Nothing is registered under ``name`` (a ``ValueError``, as the
                reference's ``RegistryError`` is); the message lists what is.
        """
        try:
            return self._factories[name]
        except (KeyError, TypeError):
            raise ConfigurationError(
                f"no Stream class is registered as stream_name={name!r} (registered: "
                f"{', '.join(sorted(self._factories))}): call shardstream.streams_registry."
                f"register({name!r}, func=YourStream) before building the dataset, in every "
                "process that builds one"
            ) from None

    def get_all(self) -> dict[str, StreamFactory]:
        """Every name and what it names."""
        return dict(self._factories)

    def build(self, name: str, arguments: Mapping[str, Any]) -> Stream:
        """``get(name)(**arguments)``, checked to be a :class:`~shardstream.Stream`.

        Raises:
            ConfigurationError: ``name`` is not registered, or built something else.
        """
        stream = self.get(name)(**arguments)
        if not isinstance(stream, Stream):
            raise ConfigurationError(
                f"stream_name={name!r} built a {type(stream).__name__}, not a shardstream "
                "Stream: register a subclass of shardstream.Stream (or a function returning one)"
            )
        return stream


#: The registry ``StreamingDataset`` looks ``stream_name`` up in.
streams_registry = StreamRegistry()
streams_registry.register("stream", func=Stream)


def dataset_streams(
    streams: Sequence[Stream] | None,
    *,
    stream_name: str,
    stream_config: Mapping[str, Any] | None,
    columns: Sequence[str] | None,
    format: str | None = None,
    version: Any = None,
    **arguments: Any,
) -> list[Stream]:
    """The streams of a ``StreamingDataset`` from its arguments.

    Args:
        streams: The dataset's ``streams``, or ``None`` to build one stream.
        stream_name: The registered class that builds it.
        stream_config: Further arguments of that class.
        columns: The dataset's Parquet ``columns``, given to the built stream when not ``None``.
        format: The built stream's ``format``, when not ``None``.
        version: The built stream's Delta ``version``, when not ``None``.
        **arguments: The dataset's :data:`DATASET_STREAM_ARGUMENTS`.

    Raises:
        ConfigurationError: Both ``streams`` and ``remote``/``local``, neither, an empty list,
            ``stream_name``/``stream_config`` beside ``streams``, or ``stream_config`` naming
            an argument the dataset passes itself.
    """
    remote, local = arguments["remote"], arguments["local"]
    if streams is not None:
        if remote is not None or local is not None:
            raise ConfigurationError(
                "pass either streams=[Stream(...), ...] or remote/local for one stream, not both"
            )
        if stream_name != "stream" or stream_config:
            raise ConfigurationError(
                f"stream_name={stream_name!r} and stream_config build the dataset's one stream "
                "when streams is not given; with streams=[...], build each Stream yourself"
            )
        if not streams:
            raise ConfigurationError("streams is empty: give at least one Stream")
        if format is not None or version is not None:
            raise ConfigurationError(
                "format= and version= describe the dataset's one stream; with streams=[...], "
                "give them to each Stream(format=..., version=...)"
            )
        return list(streams)  # the caller's own: resolving applies the split and settles weights
    if remote is None and local is None:
        raise ConfigurationError("StreamingDataset needs streams, a remote or a local")
    config = dict(stream_config or {})
    clashes = sorted(set(config) & set(DATASET_STREAM_ARGUMENTS))
    if clashes:
        raise ConfigurationError(
            f"stream_config names {clashes}, which StreamingDataset passes to the stream "
            "itself: give them as StreamingDataset arguments instead"
        )
    if columns is not None:
        config["columns"] = columns
    if format is not None:
        config["format"] = format
    if version is not None:
        config["version"] = version
    return [streams_registry.build(stream_name, {**config, **arguments})]
