"""What AWS's configuration chain says, read once through botocore, for every S3 client.

The process's botocore session (:data:`SESSIONS`), kept for as long as the sources of the chain
read the same; the chain's credentials handed to obstore through its credential-provider hook
(:class:`ChainCredentials`), refreshed as botocore refreshes them; the settings obstore cannot
honour, which send S3 reads to botocore (:func:`obstore_lacks`); and a bucket's region, asked
the way AWS answers it (:func:`bucket_region`).
"""

from __future__ import annotations

import datetime
import os
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from shardstream._optional import require

__all__ = [
    "SESSIONS",
    "ChainCredentials",
    "StaticKeys",
    "bucket_region",
    "configured",
    "credential_sources",
    "obstore_lacks",
    "says_wrong_region",
    "static_keys",
]

_PURPOSE = "Reading and writing s3:// URLs"
AWS_ENDPOINT = "https://s3.amazonaws.com"  # the global endpoint: it answers for every bucket
_REGION_HEADER = "x-amz-bucket-region"
# What object_store and S3 say when a request went to, or was signed for, the wrong region.
_WRONG_REGION = ("incorrectly configured region", "PermanentRedirect",
                 "AuthorizationHeaderMalformed", "IllegalLocationConstraint")  # fmt: skip


class Sessions:
    """The process's botocore session, kept for as long as the credential sources read the same.

    A session loads the service model and endpoint rules once, which a new session per client
    would load again. It also keeps the credentials of the standard chain once it has resolved
    them, so it is kept per what the chain reads: the ``AWS_*`` variables and the identity of
    the config and credentials files. A changed variable (another ``AWS_ACCESS_KEY_ID``) or an
    edited file gets a new session, as a session per client did. A forked child inherits the
    session (loaded data, no connections) and builds its own clients from it.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.key: tuple[Any, ...] | None = None
        self.session: Any = None

    def current(self) -> Any:
        """The kept session, or a new one when the chain's sources changed."""
        key = credential_sources()
        with self.lock:  # a botocore session is not safe to share between threads unguarded
            if self.session is None or self.key != key:
                module = require("botocore.session", extra="s3", purpose=_PURPOSE)
                self.session, self.key = module.get_session(), key
            return self.session

    def client(self, options: dict[str, Any]) -> Any:
        """A new botocore S3 client made with ``options``, from the kept session."""
        session = self.current()
        with self.lock:
            return session.create_client("s3", **options)

    def after_fork(self) -> None:
        self.lock = threading.Lock()  # a lock copied mid-use by fork would never open


SESSIONS = Sessions()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=SESSIONS.after_fork)


# The variable botocore reads for each setting, where no config file can say more.
_VARIABLES = {
    "region": "AWS_DEFAULT_REGION",
    "ca_bundle": "AWS_CA_BUNDLE",
    "use_fips_endpoint": "AWS_USE_FIPS_ENDPOINT",
    "use_dualstack_endpoint": "AWS_USE_DUALSTACK_ENDPOINT",
    "endpoint_url": "AWS_ENDPOINT_URL",
}


def configured(name: str) -> Any:
    """A setting of botocore's chain (variables, then the profile's config), e.g. ``region``.

    With no config file and no profile named, the variable alone, without importing botocore
    (which costs more CPU than the rest of a client's start).
    """
    if not _profiles():
        return os.environ.get(_VARIABLES[name]) or None
    session = SESSIONS.current()
    with SESSIONS.lock:
        return session.get_config_variable(name)


def _profiles() -> bool:
    """Whether a config file or a named profile may hold settings beyond the variables."""
    if os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE"):
        return True
    path = os.environ.get("AWS_CONFIG_FILE") or "~/.aws/config"
    return os.path.exists(os.path.expanduser(path))


def obstore_lacks(endpoint_url: str | None) -> str | None:
    """Why S3 reads must stay on botocore under this configuration, or ``None`` when they need not.

    obstore has no FIPS, dual-stack or transfer-acceleration endpoints, and does not read an
    endpoint from AWS's configuration (``AWS_ENDPOINT_URL``, a profile's ``endpoint_url``): each
    would send obstore's requests elsewhere than botocore's.
    """
    for name, what in (("use_fips_endpoint", "FIPS endpoints"),
                       ("use_dualstack_endpoint", "dual-stack endpoints")):  # fmt: skip
        if _true(configured(name)):
            return f"{what} ({name})"
    if _profiles():
        session = SESSIONS.current()
        with SESSIONS.lock:
            s3_settings = session.get_scoped_config().get("s3") or {}
        if isinstance(s3_settings, dict) and _true(s3_settings.get("use_accelerate_endpoint")):
            return "transfer acceleration (s3.use_accelerate_endpoint)"
    if endpoint_url is None:
        if os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"):
            return "an endpoint from AWS_ENDPOINT_URL(_S3) rather than S3_ENDPOINT_URL"
        if configured("endpoint_url"):
            return "an endpoint from the AWS profile's endpoint_url"
    return None


def _true(value: object) -> bool:
    return value is True or str(value).strip().lower() == "true"


class ChainCredentials:
    """botocore's credential chain as obstore's ``credential_provider`` (a callable).

    The chain (variables, ``AWS_PROFILE`` and the config files, SSO, assumed roles, container
    and instance roles) is resolved once, on the first call; each call then gives botocore's
    current credentials with their expiry, so obstore asks again before they expire and
    botocore refreshes them. Every secret handed out is remembered in :attr:`handed`, so that
    no message ever shows one.
    """

    def __init__(self) -> None:
        self._found: Any = None
        self._lock = threading.Lock()
        self.handed: set[str] = set()

    def __call__(self) -> dict[str, Any]:
        """Credentials in obstore's ``S3Credential`` form.

        Raises:
            PermissionError: The chain holds no credentials (a ``CredentialsError`` at the
                store's boundary, which names the URL and what to set).
        """
        with self._lock:
            if self._found is None:
                self._found = static_keys() or _resolved()
            found = self._found
        if found is None:
            raise PermissionError("no credentials were found in the AWS chain")
        frozen = found.get_frozen_credentials()  # refreshes credentials that are due
        self.handed.update(filter(None, (frozen.secret_key, frozen.token)))
        expiry = getattr(found, "_expiry_time", None)  # None: static credentials
        return {
            "access_key_id": frozen.access_key,
            "secret_access_key": frozen.secret_key,
            "token": frozen.token,
            # obstore takes UTC's own tzinfo only, not dateutil's that botocore uses
            "expires_at": expiry.astimezone(datetime.timezone.utc) if expiry else None,
        }

    def __getstate__(self) -> dict[str, Any]:
        return {}  # a receiving process resolves the chain itself

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]


@dataclass(frozen=True)
class StaticKeys:
    """Keys from the variables, as botocore's first provider reads them (no expiry)."""

    access_key: str
    secret_key: str
    token: str | None

    def get_frozen_credentials(self) -> StaticKeys:
        return self


def static_keys() -> StaticKeys | None:
    """The ``AWS_*`` keys, where botocore's chain would stop at them, without importing it.

    Only with no config file or profile (which could change what the chain reads) and no
    ``AWS_CREDENTIAL_EXPIRATION`` (refreshable keys): else ``None``, and botocore resolves.
    """
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not (key and secret) or os.environ.get("AWS_CREDENTIAL_EXPIRATION") or _profiles():
        return None
    return StaticKeys(key, secret, os.environ.get("AWS_SESSION_TOKEN") or None)


def _resolved() -> Any:
    session = SESSIONS.current()
    with SESSIONS.lock:
        return session.get_credentials()


def says_wrong_region(text: str) -> bool:
    """Whether an error says a request went to, or was signed for, another region's bucket."""
    return any(words in text for words in _WRONG_REGION)


def bucket_region(endpoint: str | None, bucket: str, timeout: float) -> str | None:
    """The bucket's region, from an unsigned HeadBucket's ``x-amz-bucket-region`` header.

    AWS answers it on every status (``200``, ``301``, ``403``); no credential is sent.
    ``None`` when the answer has no such header (a server with no regions).
    """
    url = f"{(endpoint or AWS_ENDPOINT).rstrip('/')}/{bucket}"
    request = urllib.request.Request(url, method="HEAD")  # noqa: S310 (an http(s) endpoint)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310
            region = answer.headers.get(_REGION_HEADER)
    except urllib.error.HTTPError as refused:
        region = refused.headers.get(_REGION_HEADER)
    except OSError:
        return None
    return str(region) if region else None


def credential_sources() -> tuple[Any, ...]:
    """What botocore's credential chain and config read, compared for equality only.

    Every ``AWS_*`` variable (keys, token, profile, files, role, container and instance
    settings), and each config file's identity (device, inode, size, modification time: an
    edited file is another file) or ``None`` when it is missing.
    """
    variables = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    paths = (
        os.environ.get("AWS_CONFIG_FILE", "~/.aws/config"),
        os.environ.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"),
    )
    return (variables, *(_file_identity(path) for path in paths))


def _file_identity(path: str) -> tuple[int, ...] | None:
    try:
        status = os.stat(os.path.expanduser(path))
    except OSError:
        return None
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
