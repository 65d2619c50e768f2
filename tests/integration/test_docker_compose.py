"""docker-compose.yaml is valid Compose and mounts only paths that exist; the Dockerfile its services
build pins its base image and packages (no engine needed: nothing is built or started)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess

import pytest
import yaml

from offsetbatch.paths import PROJECT_ROOT

pytestmark = pytest.mark.integration
COMPOSE = PROJECT_ROOT / "docker-compose.yaml"
DOCKERFILE = PROJECT_ROOT / "Dockerfile"
BROKERS = ("kafka-1", "kafka-2", "kafka-3")
STATE = "/opt/offsetbatch/state"  # OFFSETBATCH_HOME: job specs, staging, tables


PASSWORDS = {"KAFKA_ADMIN_PASSWORD": "admin-secret", "OFFSETBATCH_KAFKA_PASSWORD": "pipeline-secret",
             "AIRFLOW_JWT_SECRET": "jwt-secret"}


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
    for name in (*BROKERS, "postgres", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor",
                 "airflow-triggerer", "spark-master", "spark-worker"):
        assert name in services, name
    for broker in BROKERS:
        assert services[broker]["image"].startswith("apache/kafka:4.")


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

    from offsetbatch.source.connection import IGNORED, SUPPORTED

    doc = yaml.safe_load(COMPOSE.read_text())
    for broker in BROKERS:
        kafka = doc["services"][broker]["environment"]
        assert kafka["KAFKA_ADVERTISED_LISTENERS"].startswith(f"SASL_SSL://{broker}:9092")
        assert "SASL_SSL:SASL_SSL" in kafka["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]
        assert kafka["KAFKA_LISTENER_NAME_SASL__SSL_SASL_ENABLED_MECHANISMS"] == "SCRAM-SHA-512"  # clients: SCRAM only
        assert "ports" not in doc["services"][broker], "brokers are reached only inside the compose network"
        # the apache/kafka image's configure script reads the keystore and its passwords from here
        assert "kafka-tls:/etc/kafka/secrets:ro" in doc["services"][broker]["volumes"]
        assert (kafka["KAFKA_SSL_KEYSTORE_FILENAME"], kafka["KAFKA_SSL_KEYSTORE_CREDENTIALS"]) == ("broker.p12", "store.password")
        assert kafka["KAFKA_INTER_BROKER_LISTENER_NAME"] == "INTERNAL" and "INTERNAL:SASL_PLAINTEXT" in \
            kafka["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"], "brokers authenticate to each other too"
        assert kafka["KAFKA_LOG_DIRS"] == "/var/lib/kafka/data", "data and SCRAM users survive a recreated container"
        assert f"{broker}-data:/var/lib/kafka/data" in doc["services"][broker]["volumes"], "a data volume per broker"
    conn = json.loads(doc["services"]["airflow-scheduler"]["environment"]["AIRFLOW_CONN_KAFKA_DEFAULT"]
                      .replace("${OFFSETBATCH_KAFKA_PASSWORD:?set OFFSETBATCH_KAFKA_PASSWORD}", "x"))
    assert conn["conn_type"] == "kafka" and conn["login"] and conn["password"]
    assert set(conn["extra"]) <= SUPPORTED | set(IGNORED)
    assert conn["extra"]["security.protocol"] == "SASL_SSL" and conn["extra"]["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conn["extra"]["ssl.ca.location"].startswith("/opt/offsetbatch/kafka-ca/")
    assert "kafka-ca:/ca" in doc["services"]["kafka-certs"]["volumes"]
    # one certificate for the three brokers: every broker's name is a SAN clients verify
    certs = doc["services"]["kafka-certs"]["command"][-1]
    assert "SAN=dns:kafka-1,dns:kafka-2,dns:kafka-3" in certs


def test_three_kafka_brokers_replicate_three_ways_with_min_isr_two():
    doc = yaml.safe_load(COMPOSE.read_text())
    envs = [doc["services"][b]["environment"] for b in BROKERS]
    assert sorted(str(e["KAFKA_NODE_ID"]) for e in envs) == ["1", "2", "3"]
    assert len({e["CLUSTER_ID"] for e in envs}) == 1, "one cluster id for the three nodes"
    for env in envs:
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == "1@kafka-1:9093,2@kafka-2:9093,3@kafka-3:9093"
        assert (str(env["KAFKA_DEFAULT_REPLICATION_FACTOR"]), str(env["KAFKA_MIN_INSYNC_REPLICAS"])) == ("3", "2")
        assert str(env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"]) == "3"
        assert (str(env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"]),
                str(env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"])) == ("3", "2")
    bootstrap = json.loads(doc["services"]["airflow-scheduler"]["environment"]["AIRFLOW_CONN_KAFKA_DEFAULT"]
                           .replace("${OFFSETBATCH_KAFKA_PASSWORD:?set OFFSETBATCH_KAFKA_PASSWORD}", "x")
                           )["extra"]["bootstrap.servers"]
    assert bootstrap == "kafka-1:9092,kafka-2:9092,kafka-3:9092", "clients survive any one broker's loss"
    assert set(doc["services"]["kafka-users"]["depends_on"]) == set(BROKERS)


def _task_and_spark_services(doc: dict) -> dict:
    return {name: svc for name, svc in doc["services"].items() if name.startswith(("airflow-", "spark-"))}


def test_every_service_that_runs_tasks_or_spark_uses_the_built_image():
    doc = yaml.safe_load(COMPOSE.read_text())
    services = _task_and_spark_services(doc)
    assert {"airflow-init", "airflow-scheduler", "spark-master", "spark-worker"} <= set(services)
    images = set()
    for name, svc in services.items():
        build = svc.get("build")
        context = build if isinstance(build, str) else (build or {}).get("context")
        assert context == ".", f"service {name} must build the repository's Dockerfile"
        images.add(svc["image"])
        assert "_PIP_ADDITIONAL_REQUIREMENTS" not in (svc.get("environment") or {}), name
    assert len(images) == 1, f"one image for Airflow and Spark (same Python and pyspark): {images}"
    assert "_PIP_ADDITIONAL_REQUIREMENTS" not in COMPOSE.read_text()


def test_every_published_port_is_bound_to_loopback():
    doc = yaml.safe_load(COMPOSE.read_text())
    published = [(name, str(p)) for name, svc in doc["services"].items() for p in svc.get("ports", [])]
    assert published, "the Airflow UI and the Spark master UI are published"
    for name, port in published:
        assert port.startswith("127.0.0.1:"), f"service {name} publishes {port} beyond loopback"


def test_spark_connection_master_worker_and_shared_paths():
    """Client deploy mode against the standalone master; the executors see the job spec, staging
    and table paths (OFFSETBATCH_HOME) and the job's code at the same paths as the driver."""
    doc = yaml.safe_load(COMPOSE.read_text())
    services = doc["services"]
    airflow_env = services["airflow-scheduler"]["environment"]
    conn = json.loads(airflow_env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert (conn["conn_type"], conn["host"], conn["port"]) == ("spark", "spark://spark-master", 7077)
    assert conn["extra"]["deploy-mode"] == "client"
    master_cmd, worker_cmd = services["spark-master"]["command"], services["spark-worker"]["command"]
    assert master_cmd[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"] and "7077" in master_cmd
    assert worker_cmd[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
    assert worker_cmd[-1] == "spark://spark-master:7077"
    assert airflow_env["PYSPARK_PYTHON"] == services["spark-worker"]["environment"]["PYSPARK_PYTHON"]
    assert airflow_env["OFFSETBATCH_HOME"] == STATE

    def mounts(name: str) -> dict[str, str]:
        return {v.split(":")[1]: v.split(":")[0] for v in services[name]["volumes"]}

    driver, executors = mounts("airflow-scheduler"), mounts("spark-worker")
    for path in (STATE, "/opt/offsetbatch/include", "/opt/offsetbatch/jobs"):
        assert path in driver and driver[path] == executors.get(path), f"{path} differs between driver and executors"
    assert driver[STATE] in doc["volumes"], "the shared state is a named volume"


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines, current = [], ""
    for raw in DOCKERFILE.read_text().splitlines():
        if raw.lstrip().startswith("#") and not current:
            continue
        current += raw.rstrip("\\").strip() + " "
        if not raw.rstrip().endswith("\\"):
            if current.strip():
                lines.append(current.strip())
            current = ""
    out = []
    for line in lines:
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def _requirement_pin(name: str) -> str:
    for line in (PROJECT_ROOT / "requirements.txt").read_text().splitlines():
        if line.startswith(f"{name}=="):
            return line.split("==", 1)[1].strip()
    raise AssertionError(f"{name} is not pinned in requirements.txt")


def test_dockerfile_base_image_is_pinned_and_matches_the_airflow_pin():
    froms = [args.split() for word, args in _dockerfile_instructions() if word == "FROM"]
    stages = {f[2] for f in froms if len(f) >= 3 and f[1].upper() == "AS"}
    external = [f[0] for f in froms if f[0] not in stages]
    assert external, "the Dockerfile has a FROM"
    for image in external:
        ref, _, digest = image.partition("@")
        name, _, tag = ref.rpartition(":")
        assert name == "apache/airflow" and tag and tag != "latest", image
        assert tag == f"{_requirement_pin('apache-airflow')}-python3.11", f"{image}: not the requirements.txt pin"
        assert not digest or re.fullmatch(r"sha256:[0-9a-f]{64}", digest), image


def test_dockerfile_pins_its_apt_packages_and_installs_the_locked_python_tree():
    runs = [args for word, args in _dockerfile_instructions() if word == "RUN"]
    apt = [c for r in runs for c in r.split("&&") if re.search(r"\bapt-get install\b", c)]
    assert apt, "the JRE comes from Debian"
    packages = [a for c in apt for a in shlex.split(c)[shlex.split(c).index("install") + 1:] if not a.startswith("-")]
    assert any(p.startswith("openjdk-17-jre-headless=") for p in packages), packages
    for pkg in packages:
        name, _, version = pkg.partition("=")
        assert version and re.match(r"\d", version), f"apt package {name} is not pinned to a version"
    pips = [c.strip() for r in runs for c in r.split("&&") if re.search(r"\bpip install\b", c)]
    assert pips
    locked = [p for p in pips if re.search(r"-r \S*requirements\.txt", p) and re.search(r"-c \S*constraints\.txt", p)]
    assert locked, "the image installs requirements.txt with the constraints.txt lock"
    for p in pips:
        if p in locked:
            continue
        # the pyspark reinstall (it must win over pyspark-client): the requirements.txt pin, nothing else
        assert "--no-deps" in p and "'^pyspark=='" in p and "requirements.txt" in p, p
    reinstalls = [i for i, p in enumerate(pips) if "pyspark==" in p]
    assert reinstalls and reinstalls[-1] > pips.index(locked[0]), "pyspark is installed last (after pyspark-client)"
    for path in ("requirements.txt", "constraints.txt"):
        for line in (PROJECT_ROOT / path).read_text().splitlines():
            line = line.split("#")[0].strip()
            assert not line or re.fullmatch(r"[A-Za-z0-9_.\-\[\],]+==[\w.+!\-]+", line), f"{path}: {line!r} is not pinned"
    assert "ENTRYPOINT" not in {w for w, _ in _dockerfile_instructions()}, "the Airflow image's entrypoint stays"


def test_dockerfile_copies_project_sources_only_and_resolves_jars_as_make_setup_does():
    from offsetbatch_dev.stack.artifacts import DEPENDENCY_PLUGIN

    copies = [args.split() for word, args in _dockerfile_instructions() if word == "COPY"]
    sources = [a for c in copies if not any(x.startswith("--from=") for x in c)
               for a in c[:-1] if not a.startswith("--")]
    allowed = {"requirements.txt", "constraints.txt", "scripts/maven", "include", "jobs", "dags", "plugins"}
    assert set(sources) <= allowed, f"copied beyond the project's sources: {set(sources) - allowed}"
    for src in sources:
        assert (PROJECT_ROOT / src).exists(), src
    ignored = {line.strip() for line in (PROJECT_ROOT / ".dockerignore").read_text().splitlines()}
    assert {".git", ".venv", ".cache", ".local"} <= ignored, "state, caches and secrets stay out of the build context"
    mvn = " ".join(args for word, args in _dockerfile_instructions() if word == "RUN" and "mvn " in args)
    assert f"{DEPENDENCY_PLUGIN}:copy-dependencies" in mvn and "spark-kafka-connector.pom.xml" in mvn
    assert "maven/settings.xml" in mvn, "Maven Central only, as scripts/maven/settings.xml routes it"


def test_the_image_build_neither_copies_nor_imports_the_development_tooling():
    """The production image is the runtime only: scripts/dev stays out of the build context, and the
    build step that prunes and checks the connector jars uses the runtime's own lookup."""
    instructions = _dockerfile_instructions()
    for word, args in instructions:
        assert "offsetbatch_dev" not in args and "scripts/dev" not in args, f"{word} {args}"
    ignored = {line.strip() for line in (PROJECT_ROOT / ".dockerignore").read_text().splitlines()}
    assert "scripts/dev" in ignored, "the development tooling stays out of the build context"
    runs = " ".join(args for word, args in instructions if word == "RUN")
    assert "from offsetbatch.dag.spark_jars import spark_connector_jars" in runs, "the image checks its connector jars"
    assert "pyspark.__file__).parent / \"jars\"" in runs, "jars pyspark already ships are dropped"
