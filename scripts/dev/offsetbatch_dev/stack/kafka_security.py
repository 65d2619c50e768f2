"""Security material and settings of the local broker's ``sasl_ssl`` mode (issue 16).

What a secured broker home holds, made once per home and kept across restarts (``wipe`` removes it):

    tls/ca.pem                      the local CA's certificate: clients trust it (``ssl.ca.location``)
    tls/broker.pem                  the broker's certificate (SAN IP:127.0.0.1, DNS:localhost)
    secrets/            (0700)      everything below is mode 0600
      broker.p12                    the broker's PKCS#12 keystore (key + chain)
      broker.json                   keystore password, controller-listener (PLAIN) password
      scram-users.json              SCRAM-SHA-512 users and passwords (``admin``, ``pipeline``)
      <user>.connection.json        that user's Airflow Kafka connection ``extra``, ready to use
    server.properties   (0600)      holds the keystore password and the listeners' JAAS entries

The CA's private key is deleted once the broker certificate is signed: nothing re-issues it, so
keeping it would only be one more secret to leak. Passwords are random (``secrets.token_urlsafe``),
never printed or logged, and never put in a process's arguments: the SCRAM users are created at
storage format time by ``kafka.tools.StorageTool format --add-scram ...`` read from a Java
``@argfile`` (0600, deleted right after), and openssl reads passwords with ``-pass*
file:``.

Listeners: clients use ``SASL_SSL://127.0.0.1:<port>`` with SCRAM-SHA-512 only, which is also the
inter-broker listener (as ``admin``). The controller listener stays on loopback as
``SASL_PLAINTEXT`` with PLAIN from a static JAAS entry whose only user is ``admin``: with the
StandardAuthorizer, the controller authorizes the broker's registration and heartbeats
(CLUSTER_ACTION), so the controller principal must be a super user; making ``User:ANONYMOUS`` a super
user instead (the usual shortcut with a PLAINTEXT controller listener) would make every
unauthenticated connection to that port all-powerful. SCRAM cannot serve the controller listener:
the controller authenticates SCRAM against metadata it has not loaded yet when the broker registers.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offsetbatch.errors import OffsetbatchError

SCRAM_MECHANISM = "SCRAM-SHA-512"
ADMIN = "admin"
PIPELINE = "pipeline"
USERS = (ADMIN, PIPELINE)
CLIENT_LISTENER = "SASL_SSL"
CONTROLLER_LISTENER = "CONTROLLER"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
CERT_DAYS = 3650


class KafkaSecurityError(OffsetbatchError):
    """The broker's TLS or SASL material could not be made or read; the message says what to do."""


def _write_private(path: Path, text: str) -> None:
    """Write a secret owner-only from the first byte (no window where it is world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an existing file keeps its old mode through O_CREAT
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def _jaas(module: str, **options: str) -> str:
    return f"{module} required " + " ".join(f'{k}="{v}"' for k, v in options.items()) + ";"


@dataclass(frozen=True)
class BrokerSecurity:
    """The secured mode's files in one broker ``home`` and the settings derived from them."""

    home: Path

    @property
    def tls_dir(self) -> Path:
        return self.home / "tls"

    @property
    def secrets_dir(self) -> Path:
        return self.home / "secrets"

    @property
    def ca_file(self) -> Path:
        return self.tls_dir / "ca.pem"

    @property
    def cert_file(self) -> Path:
        return self.tls_dir / "broker.pem"

    @property
    def keystore_file(self) -> Path:
        return self.secrets_dir / "broker.p12"

    @property
    def broker_secrets_file(self) -> Path:
        return self.secrets_dir / "broker.json"

    @property
    def users_file(self) -> Path:
        return self.secrets_dir / "scram-users.json"

    def credentials_file(self, user: str = PIPELINE) -> Path:
        """The owner-only file holding ``user``'s Airflow Kafka connection ``extra`` (JSON)."""
        return self.secrets_dir / f"{user}.connection.json"

    def secret_files(self) -> list[Path]:
        """Every file under ``secrets/`` (all must be 0600)."""
        return sorted(p for p in self.secrets_dir.iterdir() if p.is_file())

    # --- making the material -------------------------------------------------------------

    def ensure(self) -> None:
        """Create passwords and TLS material once; later calls keep what exists (restart keeps users)."""
        _private_dir(self.secrets_dir)
        if not self.broker_secrets_file.exists():
            _write_private(self.broker_secrets_file, json.dumps({
                "keystore_password": secrets.token_urlsafe(24),
                "controller_password": secrets.token_urlsafe(24),
            }))
        if not self.users_file.exists():
            _write_private(self.users_file, json.dumps({u: secrets.token_urlsafe(24) for u in USERS}))
        if not (self.keystore_file.exists() and self.ca_file.exists()):
            self._make_tls()

    def _broker_secret(self, key: str) -> str:
        return self._read_json(self.broker_secrets_file)[key]

    def password(self, user: str) -> str:
        """``user``'s SCRAM password (for building client settings; never log it)."""
        users = self._read_json(self.users_file)
        if user not in users:
            raise KafkaSecurityError(f"no SCRAM user {user!r} in {self.users_file}; the broker knows {sorted(users)}")
        return users[user]

    def _read_json(self, path: Path) -> dict[str, str]:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise KafkaSecurityError(
                f"cannot read {path} ({exc.__class__.__name__}); the secured broker in {self.home} is "
                "incomplete: wipe it (offsetbatch-stack kafka wipe) and start it again with --secure"
            ) from None

    def _openssl(self, *args: str, cwd: Path) -> None:
        openssl = shutil.which("openssl")
        if openssl is None:
            raise KafkaSecurityError("openssl is not installed; install Debian's 'openssl' package and retry")
        result = subprocess.run([openssl, *args], cwd=cwd, capture_output=True, text=True, umask=0o077)
        if result.returncode != 0:
            raise KafkaSecurityError(f"openssl {args[0]} failed making the broker's TLS material:\n{result.stderr[-2000:]}")

    def _make_tls(self) -> None:
        """A local CA and a broker certificate it signs, with the SANs clients verify (127.0.0.1 and
        localhost), so hostname verification stays on; then the PKCS#12 keystore the broker loads."""
        self.tls_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.secrets_dir) as tmp:
            work = Path(tmp)
            _write_private(work / "keystore.pass", self._broker_secret("keystore_password"))
            (work / "ca.cnf").write_text(
                "[req]\nprompt=no\ndistinguished_name=dn\nx509_extensions=ext\n"
                f"[dn]\nCN=offsetbatch local CA {secrets.token_hex(4)}\n"
                "[ext]\nbasicConstraints=critical,CA:TRUE,pathlen:0\nkeyUsage=critical,keyCertSign,cRLSign\n"
                "subjectKeyIdentifier=hash\n"
            )
            (work / "broker.cnf").write_text("[req]\nprompt=no\ndistinguished_name=dn\n[dn]\nCN=localhost\n")
            (work / "broker.ext").write_text(
                "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
            )
            self._openssl("req", "-config", "ca.cnf", "-x509", "-newkey", "rsa:2048", "-noenc", "-keyout", "ca.key",
                          "-out", "ca.pem", "-days", str(CERT_DAYS), cwd=work)
            self._openssl("req", "-config", "broker.cnf", "-newkey", "rsa:2048", "-noenc", "-keyout", "broker.key",
                          "-out", "broker.csr", cwd=work)
            self._openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                          "-CAcreateserial", "-days", str(CERT_DAYS), "-sha256", "-extfile", "broker.ext",
                          "-out", "broker.pem", cwd=work)
            self._openssl("pkcs12", "-export", "-in", "broker.pem", "-inkey", "broker.key", "-certfile", "ca.pem",
                          "-name", "broker", "-passout", "file:keystore.pass", "-out", "broker.p12", cwd=work)
            shutil.move(work / "broker.p12", self.keystore_file)
            self.keystore_file.chmod(0o600)
            for name in ("broker.pem", "ca.pem"):  # certificates are public: clients must read the CA
                shutil.move(work / name, self.tls_dir / name)
                (self.tls_dir / name).chmod(0o644)
            # ca.key, broker.key and the password copy vanish with the temporary folder.

    # --- broker side -----------------------------------------------------------------------

    def broker_properties(self, port: int, controller_port: int, acl: bool) -> dict[str, str]:
        """``server.properties`` entries of the secured mode (the caller writes them 0600)."""
        admin_pw = self.password(ADMIN)
        controller_pw = self._broker_secret("controller_password")
        ctl = CONTROLLER_LISTENER.lower()
        cli = CLIENT_LISTENER.lower()
        mech = SCRAM_MECHANISM.lower()
        props = {
            "listeners": f"{CLIENT_LISTENER}://127.0.0.1:{port},{CONTROLLER_LISTENER}://127.0.0.1:{controller_port}",
            "advertised.listeners": f"{CLIENT_LISTENER}://127.0.0.1:{port}",
            "controller.listener.names": CONTROLLER_LISTENER,
            "inter.broker.listener.name": CLIENT_LISTENER,
            "listener.security.protocol.map": f"{CLIENT_LISTENER}:SASL_SSL,{CONTROLLER_LISTENER}:SASL_PLAINTEXT",
            # Clients and the broker itself: SCRAM-SHA-512 over TLS, nothing else.
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            f"listener.name.{cli}.sasl.enabled.mechanisms": SCRAM_MECHANISM,
            "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
            f"listener.name.{cli}.{mech}.sasl.jaas.config": _jaas(
                "org.apache.kafka.common.security.scram.ScramLoginModule", username=ADMIN, password=admin_pw),
            # Controller: loopback, PLAIN with one static user, see the module docstring.
            f"listener.name.{ctl}.sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            f"listener.name.{ctl}.plain.sasl.jaas.config": _jaas(
                "org.apache.kafka.common.security.plain.PlainLoginModule",
                username=ADMIN, password=controller_pw, **{f"user_{ADMIN}": controller_pw}),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.keystore_file),
            "ssl.keystore.password": self._broker_secret("keystore_password"),
            # The broker's own client (inter-broker) verifies the certificate like any client does.
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
            "ssl.endpoint.identification.algorithm": "https",
            "ssl.client.auth": "none",
            "ssl.enabled.protocols": "TLSv1.3,TLSv1.2",
        }
        if acl:
            props |= {
                "authorizer.class.name": AUTHORIZER,
                "super.users": f"User:{ADMIN}",
                "allow.everyone.if.no.acl.found": "false",
            }
        return props

    def format_argfile(self, args: list[str]) -> Path:
        """Write StorageTool's arguments plus ``--add-scram`` for every user to an owner-only Java
        ``@argfile``, so no password appears in the format process's command line."""
        scram = [
            f"{SCRAM_MECHANISM}=[name={user},password={self.password(user)}]" for user in USERS
        ]
        lines = list(args)
        for entry in scram:
            lines += ["--add-scram", entry]
        argfile = self.secrets_dir / "format.args"
        _write_private(argfile, "".join(f'"{line}"\n' for line in lines))
        return argfile

    # --- client side -------------------------------------------------------------------------

    def connection_extra(self, bootstrap: str, user: str = PIPELINE) -> dict[str, str]:
        """``user``'s settings in the Airflow Kafka connection's ``extra`` vocabulary (librdkafka
        names, as the Airflow Kafka provider documents)."""
        return {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": SCRAM_MECHANISM,
            "sasl.username": user,
            "sasl.password": self.password(user),
            "ssl.ca.location": str(self.ca_file),
        }

    def write_credentials(self, bootstrap: str) -> None:
        """(Re)write every user's connection ``extra`` file: the port may change between starts."""
        for user in USERS:
            _write_private(self.credentials_file(user), json.dumps(self.connection_extra(bootstrap, user), indent=2) + "\n")

    def kafka_python_kwargs(self, user: str = ADMIN) -> dict[str, Any]:
        """kafka-python keyword arguments authenticating as ``user``, verifying the broker against
        the local CA with hostname verification on."""
        return {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": SCRAM_MECHANISM,
            "sasl_plain_username": user,
            "sasl_plain_password": self.password(user),
            "ssl_cafile": str(self.ca_file),
            "ssl_check_hostname": True,
        }


def pipeline_acls(user: str, topics: Iterable[str], group: str) -> list[Any]:
    """The ACLs a pipeline's principal needs, and nothing else: DESCRIBE + READ on each of its topics
    (metadata, list offsets, fetch) and READ + DESCRIBE on its consumer group (commit and read
    the group's offsets)."""
    from kafka.admin import ACL, ACLOperation, ACLPermissionType, ResourcePattern, ResourceType

    def allow(rtype: ResourceType, name: str, op: ACLOperation) -> ACL:
        return ACL(principal=f"User:{user}", host="*", operation=op, permission_type=ACLPermissionType.ALLOW,
                   resource_pattern=ResourcePattern(rtype, name))

    acls = [allow(ResourceType.TOPIC, t, op) for t in topics for op in (ACLOperation.DESCRIBE, ACLOperation.READ)]
    acls += [allow(ResourceType.GROUP, group, op) for op in (ACLOperation.READ, ACLOperation.DESCRIBE)]
    return acls
