"""docker-compose.yaml's and the Dockerfile's rules, read from the files (no engine needed): no default
password, loopback-only ports, one image for Airflow and Spark, pinned base and packages, no
development tooling in the image. That the stack builds, starts and lands data exactly once is
tests/deploy/test_compose_stack.py, which starts it."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess

import pytest
import yaml

from offsetbatch_dev import PROJECT_ROOT

pytestmark = pytest.mark.integration
COMPOSE = PROJECT_ROOT / "docker-compose.yaml"
DOCKERFILE = PROJECT_ROOT / "Dockerfile"
BROKERS = ("kafka-1", "kafka-2", "kafka-3")
CELERY_WORKERS = ("airflow-worker-1", "airflow-worker-2", "airflow-worker-3")
SPARK_WORKERS = ("spark-worker-1", "spark-worker-2")
STATE = "/opt/offsetbatch/state"  # OFFSETBATCH_HOME: job specs, staging, tables


PASSWORDS = {"KAFKA_ADMIN_PASSWORD": "admin-secret", "OFFSETBATCH_KAFKA_PASSWORD": "pipeline-secret",
             "AIRFLOW_JWT_SECRET": "jwt-secret", "AIRFLOW_ADMIN_PASSWORD": "admin-password"}


def _config(env: dict) -> subprocess.CompletedProcess:
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose (Debian package) is installed by scripts/setup.sh"
    return subprocess.run([exe, "-f", str(COMPOSE), "config", "--quiet"], capture_output=True, text=True,
                          cwd=PROJECT_ROOT, env={k: v for k, v in {**os.environ, **env}.items() if v is not None})


def test_compose_file_passes_schema_validation():
    res = _config(PASSWORDS)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("missing", sorted(PASSWORDS))
def test_compose_refuses_to_start_without_its_passwords(missing):
    """No default password: a team that forgets one gets an error naming it, not a known secret."""
    res = _config({**PASSWORDS, missing: None})
    assert res.returncode != 0 and f"set {missing}" in res.stderr, res.stderr


def test_compose_has_the_services_a_team_starts_with():
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    for name in (*BROKERS, "postgres", "redis", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor",
                 "airflow-triggerer", *CELERY_WORKERS, "spark-master", *SPARK_WORKERS, "spark-connect"):
        assert name in services, name
    for broker in BROKERS:
        assert services[broker]["image"] == "${KAFKA_IMAGE:-apache/kafka:4.1.1}", "users pull apache/kafka by default"
    assert services["postgres"]["image"] == "${POSTGRES_IMAGE:-postgres:16}"
    assert services["redis"]["image"] == "${REDIS_IMAGE:-redis:7.2-bookworm}"


def test_airflow_runs_on_celery_with_settings_chosen_for_offsetbatch_tasks():
    """Issue 54: the CeleryExecutor, Redis as its broker with an append-only file on a volume (a
    restart keeps queued and unacknowledged tasks), late acks, a visibility timeout longer than any
    task, a lost worker's task retried within a minute; every worker serves `default` and a queue
    of its own name (what `airflow.queues` routes to), under the host name Airflow records."""
    doc = yaml.safe_load(COMPOSE.read_text())
    services = doc["services"]
    for name in ("airflow-scheduler", "airflow-api-server", *CELERY_WORKERS):
        env = services[name]["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
        assert env["AIRFLOW__CELERY__BROKER_URL"] == "redis://redis:6379/0", name
        assert env["AIRFLOW__CELERY__TASK_ACKS_LATE"] == "True"
        assert int(env["AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT"]) >= 3600
        assert int(env["AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT"]) == 60
    redis = services["redis"]
    assert redis["command"][:3] == ["redis-server", "--appendonly", "yes"] and "redis-data:/data" in redis["volumes"]
    assert "ports" not in redis, "Celery's broker is reached on the stack's network only"
    for name in CELERY_WORKERS:
        svc = services[name]
        assert svc["command"] == ["celery", "worker", "--queues", f"default,{name}"] and svc["hostname"] == name
        assert f"offsetbatch-state:{STATE}" in svc["volumes"]
        assert svc["depends_on"]["redis"]["condition"] == "service_healthy"


def test_every_bind_mount_exists_in_the_repo_and_no_service_runs_the_working_tree():
    """The stack runs what the image holds (the wheel); only PostgreSQL's init script is mounted."""
    doc = yaml.safe_load(COMPOSE.read_text())
    mounts = []
    for name, svc in doc["services"].items():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0] if isinstance(vol, str) else vol.get("source", "")
            if src.startswith("."):
                mounts.append((name, src))
    assert mounts == [("postgres", "./include/sql/compose-init.sql")], mounts
    for name, src in mounts:
        assert (PROJECT_ROOT / src).exists(), f"service {name} mounts {src}, which does not exist"


def _task_and_spark_services(doc: dict) -> dict:
    return {name: svc for name, svc in doc["services"].items() if name.startswith(("airflow-", "spark-"))}


def test_every_service_that_runs_tasks_or_spark_uses_the_built_image():
    doc = yaml.safe_load(COMPOSE.read_text())
    services = _task_and_spark_services(doc)
    assert {"airflow-init", "airflow-scheduler", *CELERY_WORKERS, "spark-master", *SPARK_WORKERS} <= set(services)
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


def test_spark_connect_master_worker_and_the_shared_state():
    """The sample pipelines run on the Spark Connect server, a driver on the standalone master; the
    executors (two workers) and that driver see the job specs, staging and tables (OFFSETBATCH_HOME) at
    the same path as the Airflow tasks."""
    doc = yaml.safe_load(COMPOSE.read_text())
    services = doc["services"]
    airflow_env = services["airflow-scheduler"]["environment"]
    conn = json.loads(airflow_env["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"])
    assert (conn["conn_type"], conn["host"], conn["port"]) == ("spark_connect", "sc://spark-connect", 15002)
    assert airflow_env["OFFSETBATCH_SPARK_CONNECT"] == "spark_connect_default"
    assert "--master spark://spark-master:7077" in services["spark-connect"]["command"][0]
    spark = json.loads(airflow_env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert (spark["host"], spark["port"], spark["extra"]["deploy-mode"]) == ("spark://spark-master", 7077, "client")
    for worker in SPARK_WORKERS:
        worker_cmd = services[worker]["command"]
        assert worker_cmd[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
        assert worker_cmd[-1] == "spark://spark-master:7077"
    for name in ("airflow-scheduler", *CELERY_WORKERS, *SPARK_WORKERS, "spark-connect"):
        assert f"offsetbatch-state:{STATE}" in services[name]["volumes"], f"{name} does not see {STATE}"
    assert "offsetbatch-state" in doc["volumes"], "the shared state is a named volume"


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


def test_dockerfile_builds_on_debian_bookworm_slim_unless_told_otherwise():
    """The base a user pulls and scripts/deploy.sh can make from Debian's packages."""
    instructions = _dockerfile_instructions()
    assert instructions[0] == ("ARG", "BASE_IMAGE=debian:bookworm-slim"), instructions[0]
    froms = [args.split() for word, args in instructions if word == "FROM"]
    stages = {f[2] for f in froms if len(f) >= 3 and f[1].upper() == "AS"}
    assert [f[0] for f in froms if f[0] not in stages] == ["${BASE_IMAGE}"], froms


def test_dockerfile_pins_its_apt_packages_and_installs_the_locked_python_tree():
    runs = [args for word, args in _dockerfile_instructions() if word == "RUN"]
    apt = [c for r in runs for c in r.split("&&") if re.search(r"\bapt-get install\b", c)]
    packages = [a for c in apt for a in shlex.split(c)[shlex.split(c).index("install") + 1:] if not a.startswith("-")]
    assert "openjdk-17-jre-headless=17.0.*" in packages and "python3.11" in packages, packages
    pips = [c.strip() for r in runs for c in r.split("&&") if re.search(r"\bpip install\b", c)]
    locked = [p for p in pips if re.search(r"-r \S*runtime\.txt", p) and re.search(r"-c \S*constraints\.txt", p)]
    assert locked, "the image installs the runtime requirements with the constraints.txt lock"
    reinstall = [i for i, p in enumerate(pips) if "'^pyspark=='" in p and "--no-deps" in p]
    wheel = [i for i, p in enumerate(pips) if "offsetbatch-*.whl" in p and "--no-deps" in p]
    assert reinstall and reinstall[0] > pips.index(locked[0]), "pyspark is installed again after pyspark-client"
    assert wheel, "the image installs the offsetbatch wheel"
    for path in ("requirements.txt", "constraints.txt"):
        for line in (PROJECT_ROOT / path).read_text().splitlines():
            line = line.split("#")[0].strip()
            assert not line or re.fullmatch(r"[A-Za-z0-9_.\-\[\],]+==[\w.+!\-]+", line), f"{path}: {line!r} is not pinned"
    runtime = (PROJECT_ROOT / "requirements.txt").read_text().split("# ---- development only below")[0]
    assert "apache-airflow==" in runtime and "pytest" not in runtime and "playwright" not in runtime


def test_dockerfile_copies_project_sources_only_and_resolves_jars_from_maven_central():
    from offsetbatch_dev.stack.artifacts import DEPENDENCY_PLUGIN

    copies = [args.split() for word, args in _dockerfile_instructions() if word == "COPY"]
    sources = [a for c in copies if not any(x.startswith("--from=") for x in c)
               for a in c[:-1] if not a.startswith("--")]
    allowed = {"requirements.txt", "constraints.txt", "scripts/maven", "scripts/docker/ca-certificates/",
               "pyproject.toml", "README.md", "include/offsetbatch", "include/pipelines",
               "dags/offsetbatch_pipelines.py", "dags/offsetbatch_pipeline_errors.py"}
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
