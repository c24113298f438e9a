"""Azure Blob Storage and ADLS Gen2 through adlfs.

URLs name a container and a prefix in it: ``azure://container/prefix``, ``az://container/prefix``,
``abfs://container/prefix`` or ``abfss://container/prefix``, or with the account in the URL,
``abfss://container@account.dfs.core.windows.net/prefix`` (``.blob.`` hosts work too). One
function, :func:`parse_azure_url`, reads every form, so writing and reading a URL always agree on
the container and the blob names.

Which account, and how to sign in, in this order:

1. Arguments: ``connection_string=``, or ``account_key=``, ``sas_token=`` or ``credential=`` (any
   ``azure.identity`` credential), or ``anon=True`` for a public container.
2. The environment (see :mod:`shardstream.config`): ``AZURE_STORAGE_CONNECTION_STRING``, else
   ``AZURE_STORAGE_ACCOUNT_KEY`` or ``AZURE_STORAGE_SAS_TOKEN`` (both belong to the account in
   ``AZURE_STORAGE_ACCOUNT_NAME``).
3. Otherwise ``DefaultAzureCredential`` from azure-identity (environment service principal,
   workload or managed identity, the Azure CLI's login, ...).

The account name comes from ``account_name=``, else the URL's host, else the connection string,
else ``AZURE_STORAGE_ACCOUNT_NAME``. ``endpoint_url=`` points at another blob endpoint (Azurite,
a private endpoint); a connection string's ``BlobEndpoint`` does the same.

Both flat Blob accounts and ADLS Gen2 accounts (hierarchical namespace) work: adlfs talks to the
Blob API, which Gen2 accounts also serve. Uploads are atomic for readers: a file is sent as one
Put Blob, or as blocks made visible together by one Put Block List. Object versions are the
blobs' ETags. The Azure SDK's own retries are switched off: shardstream retries in one place
(uploads in the writer, downloads in :mod:`shardstream.storage.download`), so that ``retry=N``
means exactly N retries.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shardstream import config
from shardstream._optional import require
from shardstream.errors import ConfigurationError, CredentialsError
from shardstream.storage._fsspec_store import FsspecStore
from shardstream.storage.keys import split_store_url
from shardstream.storage.obstore_client import ObstoreClient, installed, usable_here
from shardstream.storage.store_base import Failure, Kind

__all__ = ["AzureStore", "AzureURL", "parse_azure_url"]

_PURPOSE = "Reading and writing azure://, az:// and abfs:// URLs"
SCHEMES = ("azure", "az", "abfs", "abfss")
_CONTAINER = re.compile(r"^(\$root|\$web|\$logs|[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62})$")
_ACCOUNT_HOST = re.compile(r"^(?P<account>[a-z0-9]{3,24})\.(?P<service>blob|dfs)\.(?P<suffix>.+)$")
_PUBLIC_SUFFIX = "core.windows.net"
# Error codes of the Blob service that are about who asks, not what is asked for.
_AUTH_CODES = frozenset(
    {
        "AuthenticationFailed",
        "AuthorizationFailure",
        "AuthorizationPermissionMismatch",
        "AuthorizationResourceTypeMismatch",
        "AuthorizationProtocolMismatch",
        "AuthorizationSourceIPMismatch",
        "AuthorizationServiceMismatch",
        "InsufficientAccountPermissions",
        "InvalidAuthenticationInfo",
        "NoAuthenticationInformation",
        "AccountIsDisabled",
    }
)

_CREDENTIALS_HELP = (
    "Azure credentials come from connection_string=, or an account name (account_name=, the URL's "
    "host, or AZURE_STORAGE_ACCOUNT_NAME) with account_key=, sas_token= or credential=; else from "
    "the AZURE_STORAGE_CONNECTION_STRING variable, or AZURE_STORAGE_ACCOUNT_NAME with "
    "AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN; else DefaultAzureCredential (a service "
    "principal in AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET, a managed identity, or "
    "`az login`)"
)


@dataclass(frozen=True)
class AzureURL:
    """The parts of an Azure storage URL.

    Attributes:
        scheme: ``azure``, ``az``, ``abfs`` or ``abfss`` (lower case).
        container: The container (a file system, in ADLS Gen2 words).
        prefix: The dataset's prefix inside the container, without surrounding slashes.
        account: The storage account named in the URL's host, or ``None``.
        suffix: The host's suffix after the service, e.g. ``core.windows.net``, or ``None``.
        netloc: The URL's authority as written, for messages.
    """

    scheme: str
    container: str
    prefix: str
    account: str | None = None
    suffix: str | None = None
    netloc: str = ""


def parse_azure_url(url: str) -> AzureURL:
    """Read any of the Azure URL forms shardstream accepts (see the module's documentation).

    Raises:
        ConfigurationError: The URL is not one of those forms, or names an invalid container.
    """
    usage = "azure://container[/prefix] or abfss://container@account.dfs.core.windows.net[/prefix]"
    instead = " and pass a SAS token as sas_token= (or AZURE_STORAGE_SAS_TOKEN)"
    parts = split_store_url(url, SCHEMES, "an Azure storage URL", usage, instead)
    scheme = parts.scheme.lower()
    container, at, host = parts.netloc.partition("@")
    account = suffix = None
    if at:
        match = _ACCOUNT_HOST.match(host)
        if match is None:
            raise ConfigurationError(
                f"{url!r}: {host!r} is not an Azure storage account host such as "
                "account.dfs.core.windows.net or account.blob.core.windows.net"
            )
        account, suffix = match["account"], match["suffix"]
    if not _CONTAINER.match(container):
        raise ConfigurationError(
            f"{url!r}: {container!r} is not an Azure container name (3 to 63 lowercase letters, "
            "digits and single hyphens, starting and ending with a letter or digit)"
        )
    return AzureURL(scheme, container, parts.path.strip("/"), account, suffix, parts.netloc)


class AzureStore(FsspecStore):
    """A container and prefix on Azure Blob Storage or ADLS Gen2, used as a dataset root.

    The constructor only checks and settles its arguments; the connection is made on first use.

    Args:
        url: Any form :func:`parse_azure_url` reads.
        account_name: The storage account (default: the URL's host, the connection string,
            or ``AZURE_STORAGE_ACCOUNT_NAME``).
        account_key: The account's shared key.
        connection_string: A full connection string (account, key or SAS, endpoints).
        sas_token: A shared access signature for the account or container.
        credential: An ``azure.identity`` credential object (or any token credential).
        anon: Read a public container without credentials.
        endpoint_url: The blob endpoint, e.g. ``http://127.0.0.1:10000/devstoreaccount1`` for
            Azurite (default: ``https://<account>.blob.<suffix>``).
        connect_timeout: Seconds to wait for a connection.
        read_timeout: Seconds to wait for the server between two reads of a socket.
        storage_options: More keyword arguments for ``adlfs.AzureBlobFileSystem``.
        client_options: More keyword arguments for the SDK's ``BlobServiceClient``, e.g.
            ``max_single_put_size`` (larger files go up as blocks and one Put Block List).

    Secrets (the key, the connection string, SAS tokens) never appear in messages, logs or the
    store's ``repr``.

    Attributes:
        account_name: The storage account, as settled by the constructor (or ``None``).
        credential_source: Where the credentials come from: ``"the arguments"``, the variable
            that held them, or ``"DefaultAzureCredential"``; named in credential errors.

    Raises:
        ConfigurationError: The URL is not an Azure URL, the arguments name two accounts or two
            kinds of credentials, ``endpoint_url`` cannot be combined with them, or a timeout is
            not positive.
    """

    _noun = "blob"
    _clients = ("_fs", "_obstore")  # a forked child settles its own

    def __init__(
        self,
        url: str,
        *,
        account_name: str | None = None,
        account_key: str | None = None,
        connection_string: str | None = None,
        sas_token: str | None = None,
        credential: Any = None,
        anon: bool = False,
        endpoint_url: str | None = None,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
        storage_options: Mapping[str, Any] | None = None,
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        parsed = parse_azure_url(url)
        self.scheme, self.bucket, self.prefix = parsed.scheme, parsed.container, parsed.prefix
        self._netloc = parsed.netloc
        given = {
            "connection_string": connection_string,
            "account_key": account_key,
            "sas_token": sas_token,
            "credential": credential,
            "anon": anon or None,
        }
        chosen = [name for name, value in given.items() if value is not None]
        if len(chosen) > 1:
            raise ConfigurationError(
                f"AzureStore({url!r}): pass one kind of credentials, not {' and '.join(chosen)}"
            )
        if account_name and parsed.account and account_name != parsed.account:
            raise ConfigurationError(
                f"AzureStore({url!r}): account_name={account_name!r} differs from the URL's "
                f"account {parsed.account!r}"
            )
        environment = config.azure_environment()
        account = account_name or parsed.account
        self.credential_source = "the arguments"
        if not chosen:
            if environment.connection_string:
                connection_string = environment.connection_string
                self.credential_source = "AZURE_STORAGE_CONNECTION_STRING"
            elif account in (None, environment.account_name) and (
                environment.account_key or environment.sas_token
            ):
                account_key, sas_token = environment.account_key, environment.sas_token
                if account_key:
                    sas_token = None
                variable = "ACCOUNT_KEY" if account_key else "SAS_TOKEN"
                self.credential_source = f"AZURE_STORAGE_{variable}"
                account = account or environment.account_name
            else:
                self.credential_source = "DefaultAzureCredential"
        fields = connection_fields(connection_string) if connection_string else {}
        named = fields.get("accountname")
        if account and named and account != named:
            raise ConfigurationError(
                f"AzureStore({url!r}): the connection string is for account {named!r}, the URL "
                f"or account_name= names {account!r}"
            )
        self.account_name = account or named or environment.account_name
        self.endpoint_url = endpoint_url.rstrip("/") if endpoint_url else None
        if self.endpoint_url and connection_string:
            raise ConfigurationError(
                f"AzureStore({url!r}): a connection string names its endpoint (BlobEndpoint); "
                "pass endpoint_url= only with an account name"
            )
        self._suffix = parsed.suffix
        self._account_key = account_key
        self._connection_string = connection_string
        self._sas_token = sas_token.lstrip("?") if sas_token else None
        self._credential = credential
        self._anon = anon
        self._connection_secrets = [
            value
            for name, value in fields.items()
            if name in ("accountkey", "sharedaccesssignature")
        ]
        self._storage_options = dict(storage_options or {})
        self._client_options = dict(client_options or {})
        self._read_client = config.azure_client()  # "auto" until the first read settles it
        self._obstore: ObstoreClient | bool | None = None  # False: reads through adlfs
        self._init_store(connect_timeout, read_timeout)

    def __repr__(self) -> str:
        return (
            f"AzureStore({self.url('')!r}, account_name={self.account_name!r}, "
            f"credentials={self.credential_source!r})"
        )

    # --- the primitives' hooks -----------------------------------------------------------------

    def _fast_reader(self) -> ObstoreClient | None:
        """The obstore transport of reads, or ``None`` where adlfs serves them.

        obstore, when installed, for the credentials it takes: a connection string, an account
        key, a SAS token, or anonymous access. adlfs for a ``credential=`` object,
        ``DefaultAzureCredential`` (obstore's chain is another), ``storage_options`` or
        ``client_options`` (adlfs's and the SDK's own), an account outside the public cloud
        with no endpoint given, ``SHARDSTREAM_AZURE_CLIENT=adlfs``, and in a process forked
        after its parent read through obstore (its runtime does not survive ``fork()``).
        """
        if not usable_here():
            return None
        return self._lazy("_obstore", self._settle_reader) or None

    def _settle_reader(self) -> ObstoreClient | bool:
        sovereign = self._suffix not in (None, _PUBLIC_SUFFIX) and not (
            self.endpoint_url or self._connection_string
        )
        if (
            self._read_client == "adlfs"
            or not installed()
            or self._credential is not None
            or self.credential_source == "DefaultAzureCredential"
            or self._storage_options
            or self._client_options
            or sovereign
            or not self.account_name
        ):
            return False
        return ObstoreClient.of_azure_store(self)

    def _key(self, key: str) -> str:
        if "?" in key or "#" in key:
            raise ConfigurationError(
                f"key {key!r} under {self.url('')}: '?' and '#' cannot be used in Azure keys here"
            )
        return super()._key(key)

    def _create_filesystem(self) -> Any:
        adlfs = require("adlfs", extra="azure", purpose=_PURPOSE)
        options = self._filesystem_options()
        options.update(self._storage_options)
        try:
            filesystem = _listing_without_head(adlfs.AzureBlobFileSystem)(**options)
        except ValueError as exc:  # adlfs's words for a connection it cannot set up
            raise CredentialsError(
                f"connecting to {self.url('')} failed ({self._scrub(str(exc))}). "
                f"{_CREDENTIALS_HELP}."
            ) from None
        # adlfs makes its client with the SDK's default retries (three, from 15 s apart) and no
        # way to change them: replace it (not yet opened) by the same client making one attempt.
        filesystem.service_client = self._service_client(filesystem)
        return filesystem

    def _service_client(self, filesystem: Any) -> Any:
        """A blob service client for the account and credentials ``filesystem`` settled on."""
        aio = require("azure.storage.blob.aio", extra="azure", purpose=_PURPOSE)
        settings: dict[str, Any] = {
            "retry_total": 0,
            "connection_timeout": self.connect_timeout,
            "read_timeout": self.read_timeout,
            **self._client_options,
        }
        if filesystem.connection_string:
            return aio.BlobServiceClient.from_connection_string(
                filesystem.connection_string, **settings
            )
        account_url: str = filesystem.account_url
        credential = filesystem.credential
        if credential is None:
            credential = filesystem.account_key
        if credential is None and filesystem.sas_token:
            account_url += filesystem.sas_token  # adlfs put the "?" in front
        return aio.BlobServiceClient(account_url=account_url, credential=credential, **settings)

    def _filesystem_options(self) -> dict[str, Any]:
        """The arguments of adlfs for the credentials settled by the constructor."""
        options: dict[str, Any] = {
            "skip_instance_cache": True,  # a store's credentials are its own
            "use_listings_cache": False,  # others may write the same container
            "anon": self._anon,  # never adlfs's own reading of AZURE_STORAGE_ANON
            "connection_timeout": self.connect_timeout,
            "read_timeout": self.read_timeout,
        }
        if self._connection_string:
            options["connection_string"] = self._connection_string
            return options
        if not self.account_name:
            raise CredentialsError(
                f"using {self.url('')} failed: no Azure storage account is known. "
                f"{_CREDENTIALS_HELP}."
            )
        endpoint = self.endpoint_url
        if endpoint is None and self._suffix and self._suffix != _PUBLIC_SUFFIX:
            endpoint = f"https://{self.account_name}.blob.{self._suffix}"
        if endpoint is not None and (self._account_key or self._sas_token):
            # A connection string is how the SDK takes a custom endpoint with a key or a SAS.
            secret = (
                f"AccountKey={self._account_key}"
                if self._account_key
                else f"SharedAccessSignature={self._sas_token}"
            )
            options["connection_string"] = (
                f"AccountName={self.account_name};{secret};BlobEndpoint={endpoint}"
            )
            return options
        if endpoint is not None:
            host = endpoint.removeprefix("https://")
            if host == endpoint:
                raise ConfigurationError(
                    f"AzureStore({self.url('')!r}): endpoint_url={endpoint!r} needs https:// "
                    "unless an account key or SAS token signs the requests"
                )
            options["account_host"] = host
        options["account_name"] = self.account_name
        if self._account_key:
            options["account_key"] = self._account_key
        elif self._sas_token:
            options["sas_token"] = self._sas_token
        elif self._credential is not None:
            options["credential"] = self._credential
        return options

    def _classify(self, exc: Exception) -> Failure | None:
        core = require("azure.core.exceptions", extra="azure", purpose=_PURPOSE)
        status = getattr(exc, "status_code", None)
        code = getattr(exc, "error_code", None)
        detail = f"{type(exc).__name__}: {_first_lines(exc)}" + (f" [{code}]" if code else "")
        refused = isinstance(exc, (core.ClientAuthenticationError, PermissionError))
        if refused or status in (401, 403) or code in _AUTH_CODES:
            return Failure(Kind.CREDENTIALS, detail)
        not_found = isinstance(exc, (FileNotFoundError, core.ResourceNotFoundError))
        if not_found or status == 404:
            return Failure(Kind.NOT_FOUND, detail)
        if status == 416 or code == "InvalidRange":  # the base then names the size
            return Failure(Kind.PAST_END, detail)
        return Failure(Kind.OTHER, detail)

    def _credentials_help(self) -> str:
        return f"They came from {self.credential_source}. {_CREDENTIALS_HELP}"

    def _secrets(self) -> Sequence[str]:
        found = [self._account_key, self._connection_string, self._sas_token]
        found.extend(self._connection_secrets)
        return [secret for secret in found if secret]

    # --- internals ------------------------------------------------------------------------------

    def _endpoint(self) -> str:
        if self.endpoint_url:
            return self.endpoint_url
        if self._connection_string:
            fields = connection_fields(self._connection_string)
            return fields.get("blobendpoint", f"account {fields.get('accountname')}")
        return f"https://{self.account_name}.blob.{self._suffix or _PUBLIC_SUFFIX}"


@functools.cache
def _listing_without_head(filesystem_class: type) -> type:
    """``filesystem_class`` whose ``find`` lists at once, without a HEAD of the folder first.

    adlfs's ``find`` first asks whether the folder it lists is itself a blob, and ignores that
    request's failure: a server that stopped answering held each listing for two timeouts. A
    store lists the folder under its root, never a blob, so the answer is always no.
    """

    async def _isfile(self: Any, path: str) -> bool:
        return False

    return type(
        f"ListingOnly{filesystem_class.__name__}", (filesystem_class,), {"_isfile": _isfile}
    )


def connection_fields(connection_string: str) -> dict[str, str]:
    """The ``Name=value`` fields of a connection string, names in lower case."""
    fields = {}
    for item in connection_string.split(";"):
        name, sep, value = item.partition("=")
        if sep and name.strip():
            fields[name.strip().lower()] = value.strip()
    return fields


def _first_lines(exc: Exception, count: int = 2) -> str:
    """The start of an exception's message (the Azure SDK appends the whole XML reply)."""
    return " ".join(str(exc).strip().splitlines()[:count])
