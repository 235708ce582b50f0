"""SASL_SSL for the local broker: a private CA, the server certificate, SCRAM users, client settings.

Everything lives in ``<state dir>/security`` (mode 0700), made once per cluster::

    ca.pem             the CA certificate clients trust (``ssl.ca.location``)
    server.pem         the brokers' PKCS#8 private key and certificate chain (mode 0600)
    credentials.json   the SCRAM users and their generated passwords (mode 0600)

The CA's private key is not kept: it signs the one server certificate and is dropped.  The server
certificate names ``IP:127.0.0.1`` and ``DNS:localhost`` (librdkafka verifies the hostname).
SCRAM users are written into the KRaft metadata when the storage is formatted, as salted
credentials: no password appears on a command line.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import ipaddress
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from airflow_kafka_events.errors import BrokerError
from airflow_kafka_events.local_broker._common import HOST, write_atomic

SECURITY_PLAINTEXT = "plaintext"
SECURITY_SASL_SSL = "sasl_ssl"
SECURITY_CHOICES = (SECURITY_PLAINTEXT, SECURITY_SASL_SSL)

MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 4096
CLIENT_USER = "airflow"
BROKER_USER = "kafka-broker"
SECURITY_DIR = "security"
CA_FILE = "ca.pem"
SERVER_PEM = "server.pem"
CREDENTIALS_FILE = "credentials.json"
#: The listener clients (and the brokers among themselves) use in SASL_SSL mode.
SASL_SSL_LISTENER = "SASL_SSL"
_VALIDITY = dt.timedelta(days=3650)
MASK = "********"


@dataclass(frozen=True)
class ScramUser:
    name: str
    password: str = ""

    def format_argument(self, salt: bytes | None = None) -> str:
        """The ``kafka-storage format --add-scram`` value: salted, so no password on a command line."""
        salt = salt if salt is not None else secrets.token_bytes(32)
        salted = hashlib.pbkdf2_hmac("sha512", self.password.encode("utf-8"), salt, SCRAM_ITERATIONS)
        return (
            f"{MECHANISM}=[name={self.name},iterations={SCRAM_ITERATIONS},"
            f'salt="{base64.b64encode(salt).decode()}",saltedpassword="{base64.b64encode(salted).decode()}"]'
        )


@dataclass(frozen=True)
class SecurityMaterial:
    """The files of one cluster's SASL_SSL set-up (see the module docstring)."""

    directory: Path
    client: ScramUser
    broker: ScramUser

    @property
    def ca_file(self) -> Path:
        return self.directory / CA_FILE

    @property
    def server_pem(self) -> Path:
        return self.directory / SERVER_PEM

    def scram_arguments(self) -> list[str]:
        """``--add-scram`` arguments for the storage format of every node."""
        out: list[str] = []
        for user in (self.client, self.broker):
            out += ["--add-scram", user.format_argument()]
        return out

    def server_properties(self) -> dict[str, str]:
        """Broker settings of the SASL_SSL listener (the caller adds listeners and the map)."""
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{self.broker.name}" password="{self.broker.password}";'
        )
        prefix = f"listener.name.{SASL_SSL_LISTENER.lower()}"
        return {
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            f"{prefix}.{MECHANISM.lower()}.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.server_pem),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
            "ssl.client.auth": "none",
            "ssl.endpoint.identification.algorithm": "https",
        }

    def client_config(self, bootstrap_servers: str, *, show_password: bool = True) -> dict[str, str]:
        """librdkafka settings of the client user (the password masked unless ``show_password``)."""
        return {
            "bootstrap.servers": bootstrap_servers,
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": MECHANISM,
            "sasl.username": self.client.name,
            "sasl.password": self.client.password if show_password else MASK,
            "ssl.ca.location": str(self.ca_file),
        }


def ensure_security(directory: Path) -> SecurityMaterial:
    """The SASL_SSL material of ``directory``, made on first use (CA, certificate, passwords)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    if not (directory / CA_FILE).is_file() or not (directory / SERVER_PEM).is_file():
        _write_certificates(directory)
    return SecurityMaterial(directory, *_credentials(directory / CREDENTIALS_FILE))


def load_security(directory: Path) -> SecurityMaterial | None:
    """The material made earlier, ``None`` when there is none."""
    path = directory / CREDENTIALS_FILE
    if not path.is_file():
        return None
    return SecurityMaterial(directory, *_credentials(path))


def _credentials(path: Path) -> tuple[ScramUser, ScramUser]:
    if path.is_file():
        try:
            data = json.loads(path.read_text("utf-8"))
            users = {
                name: ScramUser(data[name]["username"], data[name]["password"])
                for name in ("client", "broker")
            }
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BrokerError(f"cannot read the SCRAM credentials in {path}: {exc}") from exc
        return users["client"], users["broker"]
    client = ScramUser(CLIENT_USER, secrets.token_urlsafe(24))
    broker = ScramUser(BROKER_USER, secrets.token_urlsafe(24))
    data = {
        "mechanism": MECHANISM,
        "client": {"username": client.name, "password": client.password},
        "broker": {"username": broker.name, "password": broker.password},
    }
    write_atomic(path, json.dumps(data, indent=2) + "\n", mode=0o600)
    return client, broker


def make_ca(common_name: str = "airflow-kafka-events local CA") -> tuple[object, object]:
    """A self-signed CA: ``(private_key, certificate)`` (``cryptography`` objects)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def make_server_certificate(ca_key: object, ca_cert: object) -> tuple[object, object]:
    """A server certificate for ``127.0.0.1`` / ``localhost`` signed by the CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    assert isinstance(ca_cert, x509.Certificate) and isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(HOST)), x509.DNSName("localhost")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(san, critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def pem_certificate(cert: object) -> str:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    assert isinstance(cert, x509.Certificate)
    return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


def pem_private_key(key: object) -> str:
    """PKCS#8, unencrypted (the file's mode protects it), as the broker's PEM keystore reads it."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode("ascii")


def write_ca(path: Path, common_name: str = "airflow-kafka-events local CA") -> Path:
    """Write a fresh CA certificate to ``path`` (e.g. a CA nobody's certificate chains to)."""
    _key, cert = make_ca(common_name)
    write_atomic(path, pem_certificate(cert))
    return path


def _write_certificates(directory: Path) -> None:
    ca_key, ca_cert = make_ca()
    key, cert = make_server_certificate(ca_key, ca_cert)
    write_atomic(directory / SERVER_PEM, pem_private_key(key) + pem_certificate(cert), mode=0o600)
    write_atomic(directory / CA_FILE, pem_certificate(ca_cert))
