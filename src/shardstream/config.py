"""The environment variables shardstream reads, all in this one module.

| variable | meaning |
| --- | --- |
| ``RANK`` | this process's global rank (set by torchrun and most launchers) |
| ``WORLD_SIZE`` | ranks in the job |
| ``LOCAL_RANK`` | this process's rank on its node |
| ``LOCAL_WORLD_SIZE`` | ranks on each node |
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from shardstream.errors import TopologyError
from shardstream.sampling.topology import Sourced

__all__ = ["distributed_environment"]

_DISTRIBUTED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def distributed_environment(environ: Mapping[str, str] | None = None) -> dict[str, Sourced]:
    """The launcher's variables that are set, as integers tagged ``"environment"``.

    Args:
        environ: The environment to read (default: ``os.environ``).

    Raises:
        TopologyError: A variable is set but is not a non-negative integer.
    """
    environ = os.environ if environ is None else environ
    found = {}
    for name in _DISTRIBUTED:
        text = environ.get(name)
        if text is None or text.strip() == "":
            continue
        if not text.strip().isdigit():
            raise TopologyError(f"{name}={text!r} (environment) is not a non-negative integer")
        found[name] = Sourced(int(text), f"environment {name}")
    return found
