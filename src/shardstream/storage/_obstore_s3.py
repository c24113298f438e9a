"""How an :class:`~shardstream.storage.S3Store`'s settings become an obstore S3 store.

The same settings botocore would use, so that either client reaches the same bucket as the same
identity: the region (the argument, else ``us-east-1`` with a custom endpoint, else botocore's
chain, else ``us-east-1``), then the bucket's own region when the server says the request went
to the wrong one (as botocore's redirects do); the credentials (the arguments, unsigned with
``anon``, else botocore's chain through obstore's credential-provider hook, so that
refreshable credentials keep refreshing); and the CA bundle botocore trusts. Everything is
settled when the store is made, on first use, never in a constructor.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shardstream.storage import _aws_chain
from shardstream.storage._obstore_settings import (
    NO_RETRIES,
    client_options,
    import_obstore,
)

if TYPE_CHECKING:
    from shardstream.storage.s3 import S3Store

__all__ = ["S3Settings"]

# Buckets whose region a server named (endpoint or None for AWS, bucket): every store of the
# process starts there, as each request would otherwise be refused once.
_REGIONS: dict[tuple[str | None, str], str] = {}
_REGIONS_LOCK = threading.Lock()


@dataclass
class S3Settings:
    """The obstore store of one ``S3Store``: :meth:`make` builds it, :meth:`relocate` moves it."""

    checked: S3Store
    #: The region requests are signed for, once settled (``None`` before the first store).
    region: str | None = None
    #: The chain's credentials, when neither keys nor ``anon`` were given.
    chain: _aws_chain.ChainCredentials | None = None
    #: Secrets handed to obstore, never to be shown.
    handed: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        checked = self.checked
        if checked._secret:
            self.handed.add(checked._secret)
        if not checked.anon and checked._access_key is None:
            self.chain = _aws_chain.ChainCredentials()
            self.handed = self.chain.handed

    @property
    def endpoint(self) -> str | None:
        return self.checked.endpoint_url

    def make(self) -> Any:
        """The obstore ``S3Store`` (resolves the chain: file reads, perhaps a role's request).

        Raises:
            PermissionError: The chain holds no credentials.
        """
        checked = self.checked
        settings: dict[str, Any] = {"region": self.settled_region()}
        if self.endpoint is not None:
            settings.update(endpoint=self.endpoint, virtual_hosted_style_request=False)
        if checked.requester_pays:
            settings["request_payer"] = True
        provider: Callable[[], dict[str, Any]] | None = None
        if checked.anon:
            settings["skip_signature"] = True
        elif checked._access_key is not None and checked._secret is not None:
            settings.update(access_key_id=checked._access_key,
                            secret_access_key=checked._secret)  # fmt: skip
        elif self.chain is not None:
            self.chain()  # no credentials: an error now, not from a request later
            provider = self.chain
        client = client_options(checked.connect_timeout, checked.read_timeout, self.endpoint)
        bundle = _aws_chain.configured("ca_bundle")
        if not (self.endpoint or "https").startswith("http://") and bundle:
            with open(os.path.expanduser(str(bundle)), "rb") as pem:  # what botocore trusts
                client["root_certificate"] = pem.read()
        store = import_obstore("obstore.store", "s3")
        return store.S3Store(checked.bucket, prefix=checked.prefix or None, config=settings,
                             client_options=client, retry_config=NO_RETRIES,
                             credential_provider=provider)  # fmt: skip

    def settled_region(self) -> str:
        """The region requests are signed for, settled on the first call."""
        if self.region is None:
            self.region = self._first_region()
        return self.region

    def relocate(self, error: str) -> bool:
        """Whether ``error`` said the bucket lies in another region, now learned and set.

        The region comes from an unsigned HeadBucket's answer (no credential is sent); the
        next store is made for it.
        """
        if not _aws_chain.says_wrong_region(error):
            return False
        region = _aws_chain.bucket_region(
            self.endpoint, self.checked.bucket, self.checked.connect_timeout
        )
        if region is None or region == self.region:
            return False
        with _REGIONS_LOCK:
            _REGIONS[self.endpoint, self.checked.bucket] = region
        self.region = region
        return True

    def _first_region(self) -> str:
        with _REGIONS_LOCK:
            known = _REGIONS.get((self.endpoint, self.checked.bucket))
        if known is not None:
            return known
        if self.checked.region:
            return self.checked.region
        if self.endpoint is not None:
            return "us-east-1"  # what S3-compatible servers expect, as for botocore
        return str(_aws_chain.configured("region") or "us-east-1")
