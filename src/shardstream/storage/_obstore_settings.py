"""How :mod:`shardstream.storage.obstore_client` settles obstore's settings and reads its errors.

The help text each kind of store appends to credential errors, obstore's client options and
retry settings, and the first line of its messages.
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta
from types import ModuleType
from typing import Any

from shardstream._optional import require
from shardstream.storage.store_base import check_timeouts

__all__ = [
    "AZURE_HELP",
    "GCS_HELP",
    "GOOGLE",
    "NO_RETRIES",
    "client_options",
    "first_lines",
    "import_obstore",
    "says_past_the_end",
    "says_refused",
]

GOOGLE = "https://storage.googleapis.com"
PURPOSE = "The obstore transport of object stores"

GCS_HELP = (
    "GCS credentials come from token= (a service-account key file or dict), else from "
    "Application Default Credentials: the GOOGLE_APPLICATION_CREDENTIALS variable naming a "
    "service-account key file, or `gcloud auth application-default login`, or the metadata "
    "server on Google Cloud; an emulator (endpoint_url= or STORAGE_EMULATOR_HOST) gets "
    "anonymous requests"
)
AZURE_HELP = (
    "Azure credentials come from connection_string=, or an account name (account_name=, or "
    "AZURE_STORAGE_ACCOUNT_NAME) with account_key= or sas_token=; else from the "
    "AZURE_STORAGE_CONNECTION_STRING variable, or AZURE_STORAGE_ACCOUNT_NAME with "
    "AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN; else a service principal in "
    "AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET or a managed identity"
)


# A fork while another thread imports obstore leaves the child half of the extension (its
# exceptions module without the classes), so a fork waits for an import under way.
_IMPORTING = threading.Lock()
os.register_at_fork(
    before=_IMPORTING.acquire,
    after_in_parent=_IMPORTING.release,
    after_in_child=_IMPORTING.release,
)


def import_obstore(module: str, extra: str) -> ModuleType:
    """Import ``module`` of obstore, or say which extra (each has a literal name) installs it."""
    with _IMPORTING:
        return _require(module, extra)


def _require(module: str, extra: str) -> ModuleType:
    if extra == "gcs":
        return require(module, extra="gcs", purpose=PURPOSE)
    if extra == "azure":
        return require(module, extra="azure", purpose=PURPOSE)
    return require(module, extra="s3", purpose=PURPOSE)  # S3, and HTTP: any of the three


NO_RETRIES: dict[str, Any] = {
    "max_retries": 0,
    "retry_timeout": timedelta(seconds=0),
    "backoff": {"init_backoff": timedelta(0), "max_backoff": timedelta(0), "base": 2},
}
REFUSALS = ("SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "AuthenticationFailed",
             "AuthorizationFailure", "403 Forbidden", "401 Unauthorized",
             "status: 403", "status: 401")  # fmt: skip


# A range past the end: the server's 416, or object_store's own check of an answer's range.
PAST_THE_END = ("416 Range Not Satisfiable", "Wanted range starting at")


def says_refused(text: str) -> bool:
    return any(word in text for word in REFUSALS)


def says_past_the_end(text: str) -> bool:
    return any(word in text for word in PAST_THE_END)


def client_options(connect: float, read: float, endpoint: str | None) -> dict[str, Any]:
    check_timeouts(f"obstore client of {endpoint}", connect_timeout=connect, read_timeout=read)
    options: dict[str, Any] = {
        "connect_timeout": timedelta(seconds=connect),
        "read_timeout": timedelta(seconds=read),
    }
    if endpoint is not None and endpoint.startswith("http://"):
        options["allow_http"] = True
    return options


def first_lines(exc: BaseException) -> str:
    """The message of an obstore error, without the debug dump after its first line."""
    lines = str(exc).strip().splitlines() or [""]
    return lines[0].partition("  Debug source:")[0].strip()
