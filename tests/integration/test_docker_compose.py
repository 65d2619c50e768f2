"""docker-compose.yaml is valid Compose and mounts only paths that exist (no engine needed)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from offsetbatch.paths import PROJECT_ROOT

pytestmark = pytest.mark.integration
COMPOSE = PROJECT_ROOT / "docker-compose.yaml"


PASSWORDS = {"KAFKA_ADMIN_PASSWORD": "admin-secret", "OFFSETBATCH_KAFKA_PASSWORD": "pipeline-secret"}


def _config(env: dict) -> subprocess.CompletedProcess:
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose (Debian package) is installed by scripts/setup.sh"
    return subprocess.run([exe, "-f", str(COMPOSE), "config", "--quiet"], capture_output=True, text=True,
                          cwd=PROJECT_ROOT, env={k: v for k, v in {**os.environ, **env}.items() if v is not None})


def test_compose_file_passes_schema_validation():
    res = _config(PASSWORDS)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("missing", sorted(PASSWORDS))
def test_compose_refuses_to_start_without_the_kafka_passwords(missing):
    """No default password: a team that forgets one gets an error naming it, not a known secret."""
    res = _config({**PASSWORDS, missing: None})
    assert res.returncode != 0 and f"set {missing}" in res.stderr, res.stderr


def test_compose_has_the_services_a_team_starts_with():
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    for name in ("kafka", "postgres", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor",
                 "airflow-triggerer", "spark-master", "spark-worker"):
        assert name in services, name
    assert services["kafka"]["image"].startswith("apache/kafka:4.")


def test_every_bind_mount_exists_in_the_repo():
    doc = yaml.safe_load(COMPOSE.read_text())
    mounts = []
    for name, svc in doc["services"].items():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0] if isinstance(vol, str) else vol.get("source", "")
            if src.startswith("."):
                mounts.append((name, src))
    assert mounts, "the project's folders are mounted into the Airflow and Spark services"
    for name, src in mounts:
        assert (PROJECT_ROOT / src).exists(), f"service {name} mounts {src}, which does not exist"
    mounted = {src.rstrip("/") for _, src in mounts}
    assert {"./dags", "./plugins", "./include", "./jobs"} <= mounted


def test_kafka_is_sasl_ssl_and_the_airflow_connection_uses_it():
    """Clients reach Kafka only over SASL_SSL; the connection every Airflow service gets is one
    offsetbatch accepts key by key (nothing it would drop), with the CA the certs job exports."""
    import json

    from offsetbatch.kafka_connection import IGNORED, SUPPORTED

    doc = yaml.safe_load(COMPOSE.read_text())
    kafka = doc["services"]["kafka"]["environment"]
    assert kafka["KAFKA_ADVERTISED_LISTENERS"].startswith("SASL_SSL://kafka:9092")
    assert "SASL_SSL:SASL_SSL" in kafka["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]
    assert kafka["KAFKA_LISTENER_NAME_SASL__SSL_SASL_ENABLED_MECHANISMS"] == "SCRAM-SHA-512"  # clients: SCRAM only
    assert "ports" not in doc["services"]["kafka"], "the broker is reached only inside the compose network"
    conn = json.loads(doc["services"]["airflow-scheduler"]["environment"]["AIRFLOW_CONN_KAFKA_DEFAULT"]
                      .replace("${OFFSETBATCH_KAFKA_PASSWORD:?set OFFSETBATCH_KAFKA_PASSWORD}", "x"))
    assert conn["conn_type"] == "kafka" and conn["login"] and conn["password"]
    assert set(conn["extra"]) <= SUPPORTED | set(IGNORED)
    assert conn["extra"]["security.protocol"] == "SASL_SSL" and conn["extra"]["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conn["extra"]["ssl.ca.location"].startswith("/opt/offsetbatch/kafka-ca/")
    assert "kafka-ca:/ca" in doc["services"]["kafka-certs"]["volumes"]
    # the apache/kafka image's configure script reads the keystore and its passwords from here
    assert "kafka-tls:/etc/kafka/secrets:ro" in doc["services"]["kafka"]["volumes"]
    assert (kafka["KAFKA_SSL_KEYSTORE_FILENAME"], kafka["KAFKA_SSL_KEYSTORE_CREDENTIALS"]) == ("broker.p12", "store.password")
    assert kafka["KAFKA_INTER_BROKER_LISTENER_NAME"] == "INTERNAL" and "INTERNAL:SASL_PLAINTEXT" in \
        kafka["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"], "brokers authenticate to each other too"
    assert kafka["KAFKA_LOG_DIRS"] == "/var/lib/kafka/data", "data and SCRAM users survive a recreated container"
