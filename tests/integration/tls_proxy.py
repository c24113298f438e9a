"""A TLS front for a loopback server, with a certificate authority of its own.

:class:`TLSProxy` answers ``https://127.0.0.1:<port>`` with a certificate signed by a CA made
for it (written to :attr:`TLSProxy.ca_file`), and forwards the decrypted bytes to the server.
A client trusts it only when told to trust that CA (``AWS_CA_BUNDLE``, say).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import socket
import socketserver
import ssl
import threading
from pathlib import Path

__all__ = ["TLSProxy"]

HOST = "127.0.0.1"


class TLSProxy:
    """``https://127.0.0.1:<port>`` before ``127.0.0.1:<upstream_port>`` (a context manager)."""

    def __init__(self, upstream_port: int, folder: Path) -> None:
        self.ca_file = folder / "proxy-ca.pem"
        certificate, key = _issue(self.ca_file, folder)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certificate, key)
        upstream = (HOST, upstream_port)

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                try:
                    secure = context.wrap_socket(self.request, server_side=True)
                except (ssl.SSLError, OSError):
                    return  # a client that refused the certificate
                with secure, socket.create_connection(upstream, timeout=60) as server:
                    back = threading.Thread(target=_pipe, args=(server, secure), daemon=True)
                    back.start()
                    _pipe(secure, server)
                    back.join(60)

        self._server = socketserver.ThreadingTCPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"https://{HOST}:{self._server.server_address[1]}"

    def __enter__(self) -> TLSProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


def _pipe(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := source.recv(1 << 16):
            target.sendall(chunk)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


def _issue(ca_file: Path, folder: Path) -> tuple[str, str]:
    """A CA (written to ``ca_file``) and a certificate it signed for 127.0.0.1: their paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "shardstream test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=True, crl_sign=True,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(HOST))]),
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    certificate, private = folder / "proxy-cert.pem", folder / "proxy-key.pem"
    certificate.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))  # fmt: skip
    return str(certificate), str(private)
