"""TLS for the Dask clusters datasched starts or joins (docs/runtime.md, "A closed cluster").

A Dask scheduler, its workers and their nannies run whatever a connected client sends them:
anyone who reaches an open port runs code in the process behind it, and the embedded
cluster's scheduler and nannies live in datasched's own process (the ``serve`` daemon's). So
every cluster datasched starts listens on ``tls://`` and lets in only peers that present a
certificate signed by a CA made for that cluster when it starts.

:func:`private_credentials` makes that CA in a private temporary directory (mode 0700, keys
0600) and removes the directory when the cluster closes. The CA's own key is never written
anywhere and is dropped once the two certificates are signed, so no further certificate can
be issued for the cluster: the scheduler's (also datasched's own client's) and the workers'
(:class:`ClusterCredentials`). Both are files, so that workers started as processes of
their own (a batch job, another account) can be handed the CA, the worker certificate and
its key by path. :func:`security` and :func:`cluster_security` turn them into Dask's
:class:`~distributed.security.Security`.

:func:`check_tls_options` checks the files a user gives for an existing cluster
(``--scheduler tls://... --tls-ca-file --tls-cert --tls-key``): each error is one line that
names the option.

``cryptography`` (making credentials) and ``distributed`` are imported only where used:
checking a user's files needs neither.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import ssl
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from datasched.sandbox.scratch import TLS_PREFIX, make_scratch, remove_scratch

if TYPE_CHECKING:
    from distributed.security import Security

__all__ = [
    "VALID_DAYS",
    "ClusterCredentials",
    "TlsError",
    "TlsFiles",
    "check_tls_options",
    "cluster_security",
    "make_credentials",
    "private_credentials",
    "security",
]

VALID_DAYS = 365
"""How long the certificates made for a cluster are valid. They are made anew each time a
cluster starts and die with it (their directory is removed, the CA's key was never kept), so
a long validity gives a thief nothing the cluster's own lifetime does not; a short one would
stop workers from joining (or a nanny from restarting its worker) in a daemon that runs
longer."""

CA_FILE = "ca.pem"
SCHEDULER_CERT, SCHEDULER_KEY = "scheduler.pem", "scheduler-key.pem"
WORKER_CERT, WORKER_KEY = "worker.pem", "worker-key.pem"

OPTIONS = ("--tls-ca-file", "--tls-cert", "--tls-key")
"""The command line's options for an existing cluster's credentials, in the order of
:class:`TlsFiles`' fields."""


class TlsError(ValueError):
    """TLS credentials that cannot be used; the message names the option and the reason."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """One TLS identity, as PEM files: the CA that signs every certificate the cluster
    accepts, this party's certificate and its (unencrypted) private key."""

    ca: Path
    cert: Path
    key: Path


@dataclass(frozen=True, slots=True)
class ClusterCredentials:
    """The credentials of a cluster datasched starts, all under ``directory``: the
    scheduler's (datasched's own client presents the same), and the workers' (and their
    nannies'): what a worker started elsewhere needs."""

    directory: Path
    scheduler: TlsFiles
    worker: TlsFiles


# -- making credentials -----------------------------------------------------------------


def make_credentials(directory: Path, *, valid_days: int = VALID_DAYS) -> ClusterCredentials:
    """A new CA and two certificates signed by it (the scheduler's and the workers'), written
    into ``directory``: certificates 0644, keys 0600 (created so, never wider). The
    directory must exist and be private to its owner (0700): the keys are only as secret as
    it. The CA's key stays in memory and is dropped here."""
    mode = directory.stat().st_mode
    if stat.S_IMODE(mode) & 0o077:
        raise TlsError(f"{directory}: not private (mode {stat.S_IMODE(mode):o}, expected 700)")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    # A few minutes back: a worker whose clock is a little behind still accepts them.
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=valid_days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "datasched cluster CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )

    def issue(role: str) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"datasched-{role}")])
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            # Every party is both: a worker accepts connections (from peers, the scheduler)
            # and makes them.
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName(f"datasched-{role}"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    ]
                ),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
            )
            .sign(ca_key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return cert.public_bytes(serialization.Encoding.PEM), key_pem

    _write(directory / CA_FILE, ca.public_bytes(serialization.Encoding.PEM), 0o644)
    files = {}
    for role, cert_name, key_name in (
        ("scheduler", SCHEDULER_CERT, SCHEDULER_KEY),
        ("worker", WORKER_CERT, WORKER_KEY),
    ):
        cert_pem, key_pem = issue(role)
        _write(directory / key_name, key_pem, 0o600)
        _write(directory / cert_name, cert_pem, 0o644)
        files[role] = TlsFiles(directory / CA_FILE, directory / cert_name, directory / key_name)
    return ClusterCredentials(directory, files["scheduler"], files["worker"])


def _write(path: Path, data: bytes, mode: int) -> None:
    """A new file created with ``mode`` (a key is never readable by others, not even
    between its creation and a chmod); an existing one is an error, not overwritten."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    path.chmod(mode)  # the umask may have narrowed a certificate's; never widens a key


@contextmanager
def private_credentials(
    parent: Path | None = None, *, valid_days: int = VALID_DAYS
) -> Iterator[ClusterCredentials]:
    """A cluster's credentials in a new private directory (``datasched-tls-*``, mode 0700,
    under ``parent``, else the system's temporary directory), removed with everything in
    it on leaving; if this process is killed instead, the next process that makes such a
    directory there removes it (its private key does not outlive the daemon for long:
    docs/security.md, "Scratch directories")."""
    directory = make_scratch(None, parent, prefix=TLS_PREFIX, with_tmp=False)
    try:
        directory.chmod(0o700)  # mkdtemp's own mode; said here, not assumed
        yield make_credentials(directory, valid_days=valid_days)
    finally:
        remove_scratch(directory)


# -- Dask's Security ----------------------------------------------------------------------


def security(files: TlsFiles, *, require: bool = True) -> Security:
    """Dask's security for one identity in every role (a client of an existing cluster, or
    a worker given these files): TLS with both sides' certificates checked against
    ``files.ca``; with ``require``, a plain ``tcp://`` connection is refused."""
    from distributed.security import Security

    ca, cert, key = str(files.ca), str(files.cert), str(files.key)
    return Security(  # type: ignore[no-untyped-call]
        require_encryption=require,
        tls_ca_file=ca,
        tls_client_cert=cert,
        tls_client_key=key,
        tls_scheduler_cert=cert,
        tls_scheduler_key=key,
        tls_worker_cert=cert,
        tls_worker_key=key,
    )


def cluster_security(creds: ClusterCredentials) -> Security:
    """Dask's security for a cluster datasched starts: the scheduler and datasched's own
    client present the scheduler's certificate, the workers and nannies the workers'."""
    from distributed.security import Security

    return Security(  # type: ignore[no-untyped-call]
        require_encryption=True,
        tls_ca_file=str(creds.scheduler.ca),
        tls_client_cert=str(creds.scheduler.cert),
        tls_client_key=str(creds.scheduler.key),
        tls_scheduler_cert=str(creds.scheduler.cert),
        tls_scheduler_key=str(creds.scheduler.key),
        tls_worker_cert=str(creds.worker.cert),
        tls_worker_key=str(creds.worker.key),
    )


# -- a user's files -----------------------------------------------------------------------


def check_tls_options(
    address: str | None,
    ca: Path | str | None,
    cert: Path | str | None,
    key: Path | str | None,
) -> TlsFiles | None:
    """``--scheduler`` and ``--tls-ca-file``, ``--tls-cert``, ``--tls-key`` checked
    together: the files for a ``tls://`` address (all three, readable, a CA certificate, a
    certificate and the unencrypted key that belongs to it), or ``None`` for any other
    address given without them. The credentials beside a ``tcp://`` address are refused,
    not ignored: the connection would not be encrypted, which the user did not ask for."""
    given = {o: v for o, v in zip(OPTIONS, (ca, cert, key), strict=True) if v is not None}
    is_tls = address is not None and address.startswith("tls://")
    if not given:
        if is_tls:
            raise TlsError(
                f"--scheduler: {address} is a tls:// address: give its credentials with "
                "--tls-ca-file, --tls-cert and --tls-key"
            )
        return None
    first = next(iter(given))
    if address is None:
        raise TlsError(
            f"{first}: only with --scheduler tls://HOST:PORT (the cluster datasched starts "
            "makes its own credentials)"
        )
    if not is_tls:
        raise TlsError(
            f"{first}: --scheduler {address} is not a tls:// address, so the credentials "
            "would not be used; give the scheduler's tls:// address"
        )
    missing = [o for o in OPTIONS if o not in given]
    if missing:
        raise TlsError(
            f"{missing[0]}: missing (a tls:// scheduler needs --tls-ca-file, --tls-cert and "
            "--tls-key)"
        )
    assert ca is not None
    assert cert is not None
    assert key is not None
    files = TlsFiles(Path(ca), Path(cert), Path(key))
    texts = {
        o: _read(o, p) for o, p in zip(OPTIONS, (files.ca, files.cert, files.key), strict=True)
    }
    try:
        ssl.create_default_context(cafile=str(files.ca))
    except ssl.SSLError as exc:
        raise TlsError(
            f"--tls-ca-file: {files.ca} holds no PEM certificate ({_why(exc)})"
        ) from None
    if "-----BEGIN CERTIFICATE-----" not in texts["--tls-cert"]:
        raise TlsError(f"--tls-cert: {files.cert} holds no PEM certificate")
    key_text = texts["--tls-key"]
    if "ENCRYPTED" in key_text:
        raise TlsError(
            f"--tls-key: {files.key} is encrypted, and Dask cannot ask for its passphrase; "
            "give an unencrypted key readable only by you"
        )
    if "PRIVATE KEY-----" not in key_text:
        raise TlsError(f"--tls-key: {files.key} holds no PEM private key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_cert_chain(str(files.cert), str(files.key), password=_no_password)
    except (ssl.SSLError, ValueError) as exc:
        raise TlsError(
            f"--tls-key: {files.key} does not go with the certificate {files.cert} ({_why(exc)})"
        ) from None
    return files


def _read(option: str, path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError as exc:
        raise TlsError(f"{option}: cannot read {path}: {exc.strerror or exc}") from None


def _no_password() -> str:
    """Asked for by OpenSSL only for an encrypted key, which Dask could not load either."""
    raise ValueError("the key is encrypted")


def _why(exc: BaseException) -> str:
    """OpenSSL's words without its source file and line."""
    text = exc.args[1] if isinstance(exc, ssl.SSLError) and len(exc.args) > 1 else str(exc)
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", str(text))
