"""The environment variables shardstream reads, all in this one module.

| variable | meaning |
| --- | --- |
| ``RANK`` | this process's global rank (set by torchrun and most launchers) |
| ``WORLD_SIZE`` | ranks in the job |
| ``LOCAL_RANK`` | this process's rank on its node |
| ``LOCAL_WORLD_SIZE`` | ranks on each node |
| ``S3_ENDPOINT_URL`` | endpoint of an S3-compatible store (default: AWS itself) |
| ``SHARDSTREAM_S3_REQUESTER_PAYS`` | comma-separated requester-pays buckets |
| ``SHARDSTREAM_S3_UNSIGNED`` | ``1``/``true``/``yes``: send S3 requests unsigned (public buckets) |
| ``OCI_CONFIG_FILE`` | the OCI config file with the API key's profile (``~/.oci/config``) |
| ``OCI_CLI_PROFILE`` | the profile in that file (default ``DEFAULT``) |
| ``OCI_ENDPOINT_URL`` | OCI Object Storage endpoint (default: the profile's region) |
| ``DATABRICKS_HOST`` | the Databricks workspace URL, for ``dbfs:/Volumes/...`` |
| ``DATABRICKS_TOKEN`` | a Databricks personal access token (never logged or shown) |

S3 credentials are not read here: botocore's standard chain finds them (``AWS_ACCESS_KEY_ID`` and
``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE`` and ``~/.aws/credentials``, instance roles).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from shardstream.errors import ConfigurationError, TopologyError
from shardstream.sampling.topology import Sourced

__all__ = [
    "databricks_host",
    "databricks_token",
    "distributed_environment",
    "oci_config_file",
    "oci_endpoint_url",
    "oci_profile",
    "s3_endpoint_url",
    "s3_requester_pays_buckets",
    "s3_unsigned",
]

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


def s3_requester_pays_buckets(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The buckets named in ``SHARDSTREAM_S3_REQUESTER_PAYS`` (comma-separated; blanks ignored).

    Requests to these buckets say that the requester pays for them, as AWS requires for
    requester-pays buckets.

    Args:
        environ: The environment to read (default: ``os.environ``).
    """
    environ = os.environ if environ is None else environ
    text = environ.get("SHARDSTREAM_S3_REQUESTER_PAYS", "")
    return frozenset(name.strip() for name in text.split(",") if name.strip())


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


def s3_unsigned(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``SHARDSTREAM_S3_UNSIGNED`` asks for unsigned (anonymous) S3 requests.

    Args:
        environ: The environment to read (default: ``os.environ``).

    Raises:
        ConfigurationError: The variable holds something other than a yes or a no.
    """
    environ = os.environ if environ is None else environ
    text = environ.get("SHARDSTREAM_S3_UNSIGNED", "").strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigurationError(
        f"SHARDSTREAM_S3_UNSIGNED={text!r} (environment) is neither 1/true/yes nor 0/false/no"
    )


def _text(name: str, environ: Mapping[str, str] | None) -> str | None:
    environ = os.environ if environ is None else environ
    return environ.get(name, "").strip() or None


def oci_config_file(environ: Mapping[str, str] | None = None) -> str:
    """The OCI config file: ``OCI_CONFIG_FILE``, else ``~/.oci/config`` (``~`` not expanded).

    Args:
        environ: The environment to read (default: ``os.environ``).
    """
    return _text("OCI_CONFIG_FILE", environ) or "~/.oci/config"


def oci_profile(environ: Mapping[str, str] | None = None) -> str:
    """The profile of the OCI config file: ``OCI_CLI_PROFILE``, else ``DEFAULT``.

    Args:
        environ: The environment to read (default: ``os.environ``).
    """
    return _text("OCI_CLI_PROFILE", environ) or "DEFAULT"


def oci_endpoint_url(environ: Mapping[str, str] | None = None) -> str | None:
    """The Object Storage endpoint from ``OCI_ENDPOINT_URL``, or ``None`` (the profile's region).

    Args:
        environ: The environment to read (default: ``os.environ``).
    """
    return _text("OCI_ENDPOINT_URL", environ)


def databricks_host(environ: Mapping[str, str] | None = None) -> str | None:
    """The Databricks workspace URL from ``DATABRICKS_HOST``, or ``None`` when unset or blank.

    A bare host name (``adb-1.azuredatabricks.net``) is given ``https://``.

    Args:
        environ: The environment to read (default: ``os.environ``).
    """
    host = _text("DATABRICKS_HOST", environ)
    if host is not None and "://" not in host:
        host = "https://" + host
    return host


def databricks_token(environ: Mapping[str, str] | None = None) -> str | None:
    """The Databricks personal access token from ``DATABRICKS_TOKEN``, or ``None``.

    Args:
        environ: The environment to read (default: ``os.environ``).
    """
    return _text("DATABRICKS_TOKEN", environ)
