"""The environment variables shardstream reads, all in this one module.

| variable | meaning |
| --- | --- |
| ``RANK`` | this process's global rank (set by torchrun and most launchers) |
| ``WORLD_SIZE`` | ranks in the job |
| ``LOCAL_RANK`` | this process's rank on its node |
| ``LOCAL_WORLD_SIZE`` | ranks on each node |
| ``S3_ENDPOINT_URL`` | endpoint of an S3-compatible store (default: AWS itself) |
| ``SHARDSTREAM_CACHE_DIR`` | where streamed datasets are cached when ``local`` is not given |
| ``SHARDSTREAM_IO_URING`` | ``0``/``false``/``no``/``off``: read with ``pread``, never io_uring |
| ``SHARDSTREAM_S3_REQUESTER_PAYS`` | comma-separated requester-pays buckets |
| ``SHARDSTREAM_S3_UNSIGNED`` | ``1``/``true``/``yes``: send S3 requests unsigned (public buckets) |
| ``OCI_CONFIG_FILE`` | the OCI config file with the API key's profile (``~/.oci/config``) |
| ``OCI_CLI_PROFILE`` | the profile in that file (default ``DEFAULT``) |
| ``OCI_ENDPOINT_URL`` | OCI Object Storage endpoint (default: the profile's region) |
| ``DATABRICKS_HOST`` | the Databricks workspace URL, for ``dbfs:/Volumes/...`` |
| ``DATABRICKS_TOKEN`` | a Databricks personal access token (never logged or shown) |
| ``STORAGE_EMULATOR_HOST`` | a GCS emulator, ``host:port`` or a URL (anonymous requests) |
| ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT`` | set to ``false`` before gcsfs is imported, if unset |
| ``AZURE_STORAGE_CONNECTION_STRING`` | an Azure connection string (never logged or shown) |
| ``AZURE_STORAGE_ACCOUNT_NAME`` | the Azure storage account |
| ``AZURE_STORAGE_ACCOUNT_KEY`` | that account's shared key (never logged or shown) |
| ``AZURE_STORAGE_SAS_TOKEN`` | a SAS token for that account (never logged or shown) |

S3 credentials are not read here: botocore's standard chain finds them (``AWS_ACCESS_KEY_ID`` and
``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE`` and ``~/.aws/credentials``, instance roles).
GCS credentials are not read here either: google-auth finds Application Default Credentials
(``GOOGLE_APPLICATION_CREDENTIALS``, the file of ``gcloud auth application-default login``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field

from shardstream.errors import ConfigurationError, TopologyError
from shardstream.sampling.topology import Sourced

__all__ = [
    "AzureEnvironment",
    "azure_client",
    "azure_environment",
    "cache_root",
    "databricks_host",
    "databricks_token",
    "distributed_environment",
    "gcs_emulator_host",
    "io_uring_enabled",
    "normalize_gcs_endpoint",
    "oci_config_file",
    "oci_endpoint_url",
    "oci_profile",
    "prepare_gcsfs_import",
    "s3_client",
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
            raise TopologyError(
                f"{name}={text!r} (environment) is not a non-negative integer: fix or unset "
                f"{name} (the launcher, e.g. torchrun, sets it)"
            )
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


def s3_client(environ: Mapping[str, str] | None = None) -> str:
    """Which client S3 reads go through, from ``SHARDSTREAM_S3_CLIENT``.

    ``auto`` (the default: obstore when the ``obstore`` package is installed, else botocore;
    ``shardstream.storage.s3`` settles it), ``obstore`` (``shardstream.storage.obstore_client``,
    an error naming the extra if it is missing), ``botocore``, or ``plain``
    (``shardstream.storage.plain_s3``, where the settings allow it, else botocore).

    Args:
        environ: The environment to read (default: ``os.environ``).

    Raises:
        ConfigurationError: The variable names another client.
    """
    environ = os.environ if environ is None else environ
    text = environ.get("SHARDSTREAM_S3_CLIENT", "").strip().lower() or "auto"
    if text not in ("auto", "botocore", "obstore", "plain"):
        raise ConfigurationError(
            f"SHARDSTREAM_S3_CLIENT={text!r} (environment) is none of auto, botocore, obstore "
            "and plain"
        )
    return text


def azure_client(environ: Mapping[str, str] | None = None) -> str:
    """Which client Azure Blob reads go through, from ``SHARDSTREAM_AZURE_CLIENT``.

    ``auto`` (the default: obstore when the ``obstore`` package is installed and the
    credentials are ones it takes, else adlfs; ``shardstream.storage.azure`` settles it) or
    ``adlfs``.

    Args:
        environ: The environment to read (default: ``os.environ``).

    Raises:
        ConfigurationError: The variable names another client.
    """
    environ = os.environ if environ is None else environ
    text = environ.get("SHARDSTREAM_AZURE_CLIENT", "").strip().lower() or "auto"
    if text not in ("auto", "adlfs"):
        raise ConfigurationError(
            f"SHARDSTREAM_AZURE_CLIENT={text!r} (environment) is neither auto nor adlfs"
        )
    return text


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


def cache_root(environ: Mapping[str, str] | None = None) -> str:
    """The folder that holds the caches of datasets streamed without an explicit ``local``.

    ``SHARDSTREAM_CACHE_DIR`` when set, else ``shardstream-<user id>`` in the system's temporary
    folder (``TMPDIR``): one per user, so users of a shared machine never collide.

    Args:
        environ: The environment to read (default: ``os.environ``).
    """
    environ = os.environ if environ is None else environ
    text = environ.get("SHARDSTREAM_CACHE_DIR", "").strip()
    if text:
        return os.path.expanduser(text)
    user = os.getuid() if hasattr(os, "getuid") else os.getlogin()
    temporary = environ.get("TMPDIR") or tempfile.gettempdir()
    return os.path.join(temporary, f"shardstream-{user}")


# --- Google Cloud Storage and Azure (the storage.gcs and storage.azure backends) ---------------


def normalize_gcs_endpoint(text: str) -> str:
    """A GCS endpoint as a URL: ``host:port`` becomes ``http://host:port``; no trailing slash."""
    text = text.strip().rstrip("/")
    return text if text.startswith(("http://", "https://")) else f"http://{text}"


def gcs_emulator_host(environ: Mapping[str, str] | None = None) -> str | None:
    """The GCS emulator from ``STORAGE_EMULATOR_HOST`` as a URL, or ``None`` (Google itself).

    Unset, blank and ``default`` mean Google itself, as in Google's own client libraries.

    Args:
        environ: The environment to read (default: ``os.environ``).
    """
    text = _text("STORAGE_EMULATOR_HOST", environ)
    if text is None or text == "default":
        return None
    return normalize_gcs_endpoint(text)


def prepare_gcsfs_import(environ: MutableMapping[str, str] | None = None) -> None:
    """Set ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` unless it is set already.

    gcsfs reads the variable once, when it is imported: on, its experimental filesystem for
    zonal and hierarchical buckets makes every bucket call wait about a minute where those are
    not available. A value the user set is left alone.

    Args:
        environ: The environment to change (default: ``os.environ``).
    """
    environ = os.environ if environ is None else environ
    environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


@dataclass(frozen=True)
class AzureEnvironment:
    """The Azure storage variables that are set (blank counts as unset); secrets stay out of repr.

    Attributes:
        account_name: ``AZURE_STORAGE_ACCOUNT_NAME``.
        account_key: ``AZURE_STORAGE_ACCOUNT_KEY``.
        connection_string: ``AZURE_STORAGE_CONNECTION_STRING``.
        sas_token: ``AZURE_STORAGE_SAS_TOKEN``.
    """

    account_name: str | None = None
    account_key: str | None = field(default=None, repr=False)
    connection_string: str | None = field(default=None, repr=False)
    sas_token: str | None = field(default=None, repr=False)


def azure_environment(environ: Mapping[str, str] | None = None) -> AzureEnvironment:
    """The Azure storage account and credentials given by the environment.

    Args:
        environ: The environment to read (default: ``os.environ``).
    """
    return AzureEnvironment(
        account_name=_text("AZURE_STORAGE_ACCOUNT_NAME", environ),
        account_key=_text("AZURE_STORAGE_ACCOUNT_KEY", environ),
        connection_string=_text("AZURE_STORAGE_CONNECTION_STRING", environ),
        sas_token=_text("AZURE_STORAGE_SAS_TOKEN", environ),
    )


def io_uring_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether readers may use io_uring (``SHARDSTREAM_IO_URING`` is not ``0``/``false``/...)."""
    environ = os.environ if environ is None else environ
    switch = environ.get("SHARDSTREAM_IO_URING", "1").strip().lower()
    return switch not in ("0", "false", "no", "off")
