"""Running code that imports ``streaming`` (mosaicml-streaming) on shardstream, opt-in.

Frameworks such as Composer and LLM Foundry import ``streaming`` themselves (LLM Foundry's
text datasets subclass ``streaming.StreamingDataset``), so changing one's own imports is not
enough. :func:`install_streaming_alias` registers modules under the ``streaming`` names for
the rest of the process, whose names are shardstream's: ``from streaming import
StreamingDataset`` then gives :class:`shardstream.StreamingDataset` itself.

The modules and names provided are those of ``shardstream.compat.ALIASES``; any other
``streaming`` module fails to import with a message naming what to use instead.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import logging
import sys
import types
from collections.abc import Sequence
from typing import Any

from shardstream.errors import StreamingAliasError

__all__ = ["ALIASES", "REFERENCE_VERSION", "clean_stale_shared_memory", "install_streaming_alias"]

logger = logging.getLogger(__name__)

#: The mosaicml-streaming version whose API the alias provides: its ``streaming.__version__``.
REFERENCE_VERSION = "0.13.0"

_SPLIT = "shardstream.writer.split_writer"
_XSV = {"CSVWriter": _SPLIT, "TSVWriter": _SPLIT, "XSVWriter": _SPLIT}
_WRITERS = {"JSONWriter": _SPLIT, "MDSWriter": "shardstream.writer.mds_writer", **_XSV}
_TOP = {
    **_WRITERS,
    "LocalDataset": "shardstream.dataset.local",
    "Stream": "shardstream.dataset.stream",
    "StreamingDataLoader": "shardstream.loader.dataloader",
    "StreamingDataset": "shardstream.dataset.streaming",
}

#: Each module the alias registers, and where each of its names comes from.
ALIASES: dict[str, dict[str, str]] = {
    "streaming": _TOP,
    "streaming.base": _TOP,
    "streaming.base.dataset": {"StreamingDataset": "shardstream.dataset.streaming"},
    "streaming.base.dataloader": {"StreamingDataLoader": "shardstream.loader.dataloader"},
    "streaming.base.local": {"LocalDataset": "shardstream.dataset.local"},
    "streaming.base.stream": {
        "Stream": "shardstream.dataset.stream",
        "streams_registry": "shardstream.dataset.stream_registry",
    },
    "streaming.base.util": {
        "clean_stale_shared_memory": "shardstream.compat",
        "merge_index": "shardstream.writer.merge",
    },
    "streaming.base.converters": {
        "SPARK_TO_MDS": "shardstream.converters.spark_types",
        "dataframe_to_mds": "shardstream.converters.spark",
        "infer_dataframe_schema": "shardstream.converters.spark_types",
        "is_json_compatible": "shardstream.converters.spark_types",
    },
    "streaming.base.format": _WRITERS,
    "streaming.base.format.json": {"JSONWriter": _SPLIT},
    "streaming.base.format.mds": {"MDSWriter": "shardstream.writer.mds_writer"},
    "streaming.base.format.xsv": _XSV,
}

# Names of the reference that have no counterpart, and what to do instead.
_NOT_PROVIDED = dict.fromkeys(
    ("multimodal", "text", "vision"),
    "shardstream has no ready-made dataset classes: subclass StreamingDataset",
)
_MARK = "__shardstream_alias__"

# The reference's modules that the alias does not provide, by prefix (the longest one that
# matches names the module): what a user of each imports or does instead.
_MODULE_ADVICE = {
    "streaming._version": "read streaming.__version__ (the alias sets it) or "
    "shardstream.__version__",
    "streaming.base.array": "StreamingDataset and LocalDataset index themselves (ds[i])",
    "streaming.base.batching": "pass batching_method= to StreamingDataset",
    "streaming.base.compression": "shardstream.format.compression (MDSWriter(compression=...))",
    "streaming.base.constant": "StreamingDataset's arguments (the reference's constants are "
    "its own)",
    "streaming.base.converters.dataframe_to_mds": "import dataframe_to_mds from "
    "streaming.base.converters (or shardstream.converters)",
    "streaming.base.distributed": "shardstream.dataset.world (ranks from torch.distributed "
    "and the environment)",
    "streaming.base.format.base": "shardstream.format (the shard format) and MDSWriter",
    "streaming.base.format.index": "shardstream.format.index",
    "streaming.base.format.json": "StreamingDataset, which reads json shards as they are",
    "streaming.base.format.xsv": "StreamingDataset, which reads csv, tsv and xsv shards as "
    "they are",
    "streaming.base.format.mds.encodings": "shardstream.register_encoding and "
    "shardstream.get_encoding",
    "streaming.base.format.mds.reader": "LocalDataset, which reads MDS shards",
    "streaming.base.format.mds.writer": "import MDSWriter from streaming.base.format.mds",
    "streaming.base.hashing": "shardstream.format.hashing (MDSWriter(hashes=...))",
    "streaming.base.partition": "pass partition_algo= to StreamingDataset",
    "streaming.base.registry_utils": "shardstream.StreamRegistry and shardstream.streams_registry",
    "streaming.base.sampling": "pass sampling_method= to StreamingDataset",
    "streaming.base.shared": "nothing: shardstream keeps no shared memory (ranks and workers "
    "coordinate through locked files); delete the import",
    "streaming.base.shuffle": "pass shuffle_algo= to StreamingDataset",
    "streaming.base.spanner": "StreamingDataset, which maps sample ids to shards itself",
    "streaming.base.storage": "shardstream.storage (open_store, download_file); "
    "MDSWriter(out='s3://...') uploads",
    "streaming.base.world": "shardstream.dataset.world (ranks from torch.distributed and the "
    "environment)",
    "streaming.multimodal": "subclass StreamingDataset (shardstream has no ready-made datasets); "
    "convert with shardstream convert or MDSWriter",
    "streaming.text": "subclass StreamingDataset (shardstream has no ready-made datasets); "
    "convert with shardstream convert or MDSWriter",
    "streaming.vision": "subclass StreamingDataset (shardstream has no ready-made datasets); "
    "convert with shardstream convert or MDSWriter",
}


def _module_advice(fullname: str) -> str:
    """What to use instead of the reference's module ``fullname``: the longest prefix's advice."""
    parts = fullname.split(".")
    for end in range(len(parts), 0, -1):
        advice = _MODULE_ADVICE.get(".".join(parts[:end]))
        if advice is not None:
            return advice
    return _NOT_PROVIDED.get(parts[-1], f"it provides {', '.join(ALIASES)} only")


def clean_stale_shared_memory() -> None:
    """Do nothing: shardstream leaves no shared memory behind to clean.

    The reference's ``streaming.base.util.clean_stale_shared_memory``, for scripts that call it
    at start-up. Ranks and workers coordinate through locked files the kernel releases.

    Example:
        clean_stale_shared_memory()  # safe to delete the call
    """
    logger.debug("clean_stale_shared_memory: nothing to clean in shardstream")


def install_streaming_alias() -> list[str]:
    """Make ``import streaming`` (and the submodules ``compat.ALIASES`` names) give shardstream.

    For the rest of the process, ``streaming.StreamingDataset`` *is*
    :class:`shardstream.StreamingDataset`, ``streaming.base.util.merge_index`` is
    :func:`shardstream.merge_index`, and so on; ``streaming.__version__`` reads
    ``shardstream.compat.REFERENCE_VERSION``. Call it first in the launch script, before
    anything imports ``streaming`` (Composer, LLM Foundry, your own modules), at module level:
    DataLoader workers started with ``spawn`` or ``forkserver`` re-import the main script, and
    need the alias before they unpickle a dataset whose class is defined against
    ``streaming``. Calling it again does nothing.

    Limits: only the names in ``shardstream.compat.ALIASES`` exist (``import streaming.text``
    and modules such as ``streaming.base.shared`` fail naming what to use), the
    installed package's metadata is not faked
    (``importlib.metadata.version("mosaicml-streaming")`` still asks pip), and shardstream's
    own behaviour differs where docs/migrating-from-mosaicml-streaming.md says so.

    Returns:
        The names of the modules registered.

    Raises:
        StreamingAliasError: The real mosaicml-streaming (or another ``streaming``) is imported
            already: move the call before that import, or keep the real package.

    Example:
        import shardstream
        shardstream.install_streaming_alias()  # first thing: before composer or llmfoundry
        from streaming import StreamingDataset  # shardstream.StreamingDataset
    """
    current = sys.modules.get("streaming")
    if current is not None and getattr(current, _MARK, False):
        return list(ALIASES)
    present = sorted(name for name in sys.modules if _is_streaming(name))
    if present:
        where = getattr(sys.modules[present[0]], "__file__", None) or "an unknown place"
        raise StreamingAliasError(
            f"cannot install shardstream's streaming alias: {present[0]} is imported already "
            f"(from {where}). Call shardstream.install_streaming_alias() before anything "
            "imports streaming (first thing in the launch script), or drop the call to keep "
            "mosaicml-streaming"
        )
    real = importlib.util.find_spec("streaming")
    if real is not None:
        logger.info("the streaming alias shadows the package at %s in this process", real.origin)
    modules = {name: _module(name, names) for name, names in ALIASES.items()}
    sys.modules["streaming"].__version__ = REFERENCE_VERSION  # type: ignore[attr-defined]
    for name, module in modules.items():
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(modules[parent], child, module)
    sys.meta_path.insert(0, _Refuser())
    logger.info("streaming now names shardstream in this process: %s", ", ".join(modules))
    return list(modules)


def _is_streaming(name: str) -> bool:
    return name == "streaming" or name.startswith("streaming.")


def _module(name: str, names: dict[str, str]) -> types.ModuleType:
    """An alias module whose attributes load from shardstream on first use."""
    module = types.ModuleType(name, f"shardstream standing in for mosaicml-streaming's {name}.")
    # Every alias module is a package, so that the import of any submodule reaches _Refuser
    # (a plain module's would fail first, with Python's generic "is not a package").
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    module.__path__ = []
    setattr(module, _MARK, True)
    module.__all__ = sorted(names)  # type: ignore[attr-defined]

    def attribute(attr: str) -> Any:
        source = names.get(attr)
        if source is None:
            hint = _NOT_PROVIDED.get(attr)
            if hint is not None:  # an ImportError, so that `from streaming import X` shows it
                raise StreamingAliasError(f"{name}.{attr} is not provided by shardstream: {hint}")
            raise AttributeError(f"module {name!r} (shardstream's alias) has no attribute {attr!r}")
        value = getattr(importlib.import_module(source), attr)
        setattr(module, attr, value)
        return value

    module.__getattr__ = attribute  # type: ignore[method-assign]
    module.__dir__ = lambda: sorted(names)  # type: ignore[method-assign]
    sys.modules[name] = module
    return module


class _Refuser:
    """Fails the import of a ``streaming`` module the alias does not provide, saying why."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: Any = None
    ) -> None:
        if not _is_streaming(fullname):
            return None
        hint = _module_advice(fullname)
        raise StreamingAliasError(
            f"{fullname} is not provided by shardstream's streaming alias: {hint}. Import "
            "from shardstream directly, or run without install_streaming_alias()",
            name=fullname,
        )
