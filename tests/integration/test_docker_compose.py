"""docker-compose.yaml is valid Compose and mounts only paths that exist (no engine needed)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from offsetbatch.paths import PROJECT_ROOT

pytestmark = pytest.mark.integration
COMPOSE = PROJECT_ROOT / "docker-compose.yaml"


def test_compose_file_passes_schema_validation():
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose (Debian package) is installed by scripts/setup.sh"
    res = subprocess.run([exe, "-f", str(COMPOSE), "config", "--quiet"], capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert res.returncode == 0, res.stderr


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
