"""The environment variables shardstream reads, all in this one module.

| variable | meaning |
| --- | --- |
| ``RANK`` | this process's global rank (set by torchrun and most launchers) |
| ``WORLD_SIZE`` | ranks in the job |
| ``LOCAL_RANK`` | this process's rank on its node |
| ``LOCAL_WORLD_SIZE`` | ranks on each node |
| ``S3_ENDPOINT_URL`` | endpoint of an S3-compatible store (default: AWS itself) |

S3 credentials are not read here: botocore's standard chain finds them (``AWS_ACCESS_KEY_ID`` and
``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE`` and ``~/.aws/credentials``, instance roles).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from shardstream.errors import TopologyError
from shardstream.sampling.topology import Sourced

__all__ = ["distributed_environment", "s3_endpoint_url"]

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


def s3_endpoint_url(environ: Mapping[str, str] | None = None) -> str | None:
    """The S3 endpoint from ``S3_ENDPOINT_URL``, or ``None`` (AWS itself) when unset or blank.

    Args:
        environ: The environment to read (default: ``os.environ``).
    """
    environ = os.environ if environ is None else environ
    text = environ.get("S3_ENDPOINT_URL", "").strip()
    return text or None
