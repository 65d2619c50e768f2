"""The container deployment, started and proven: docker-compose.yaml's whole stack, built from the
repository's Dockerfile (the offsetbatch wheel inside) by scripts/deploy.sh, exactly as the README's
"Deploying" section runs it.

Real Docker Engine (Debian's docker.io, started by the script when missing), real images: the base
`debian:bookworm-slim` is made with debootstrap when it cannot be pulled, and so are the Kafka and
PostgreSQL images (OFFSETBATCH_LOCAL_UPSTREAM=1: scripts/docker/kafka from Maven Central's broker
artifacts, scripts/docker/postgres from Debian's PostgreSQL) because no registry is reachable here;
everything else is what a user builds. Three SASL_SSL brokers, PostgreSQL, Airflow's api-server,
scheduler, dag-processor and triggerer, a Spark master, worker and Spark Connect server.

The test produces the sample topic through the secured listener, runs the sample pipeline through
Airflow's authenticated REST API, reads the Parquet table out of the shared volume with pyarrow
(its own reader), kills a broker and the Spark worker while a batch is being written, runs again,
and checks every record exactly once; it opens the UI plugin's pages through the api-server, and
`down -v` must leave nothing behind. The timeline (each service ready at t+s, the runs, the kill)
goes to tests/artifacts/deploy-timeline.json.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from harness import AirflowRest
from offsetbatch_dev import PROJECT_ROOT

pytestmark = pytest.mark.deploy

DEPLOY = PROJECT_ROOT / "scripts" / "deploy.sh"
PROJECT = "offsetbatch-deploytest"
PORT = 28080
DAG = "offsetbatch_sample_events"
TABLE = "/opt/offsetbatch/state/tables/sample_events"
TOPIC = "sample-events"
ARTIFACTS = PROJECT_ROOT / "tests" / "artifacts"
ONE_SHOT = {"kafka-certs", "kafka-users", "airflow-init"}

# Runs in the scheduler container with its own Python: the Kafka connection Airflow has (SASL_SSL,
# SCRAM-SHA-512, the stack's CA), confluent-kafka's producer with acks=all and idempotence.
PRODUCER = r"""
import json, os, sys
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
conn = json.loads(os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"])
conf = {**conn["extra"], "sasl.username": conn["login"], "sasl.password": conn["password"]}
admin = AdminClient(conf)
if sys.argv[1] not in admin.list_topics(timeout=30).topics:
    admin.create_topics([NewTopic(sys.argv[1], 4, 3)])[sys.argv[1]].result(60)
producer = Producer({**conf, "acks": "all", "enable.idempotence": True, "linger.ms": 20})
failed = []
first, count = int(sys.argv[2]), int(sys.argv[3])
for i in range(first, first + count):
    event = {"event_id": f"e-{i:08d}", "kind": "click" if i % 3 else "purchase", "user_id": i % 997,
             "page": f"/p/{i % 50}", "event_time": "2026-11-24T10:%02d:00+00:00" % (i % 60), "amount": i % 100 / 4}
    while True:
        try:
            producer.produce(sys.argv[1], json.dumps(event).encode(), key=str(i % 97).encode(),
                             on_delivery=lambda err, msg: err and failed.append(str(err)))
            break
        except BufferError:
            producer.poll(0.1)
left = producer.flush(120)
print(json.dumps({"failed": failed[:3], "nfailed": len(failed), "unflushed": left}))
sys.exit(1 if failed or left else 0)
"""


class Stack:
    """scripts/deploy.sh with this test's project name, ports and state folder."""

    def __init__(self, state: Path):
        self.state = state
        self.env = {**os.environ, "COMPOSE_PROJECT_NAME": PROJECT, "AIRFLOW_PORT": str(PORT),
                    "SPARK_MASTER_UI_PORT": str(PORT + 1), "SPARK_WORKER_UI_PORT": str(PORT + 2),
                    "OFFSETBATCH_LOCAL_UPSTREAM": "1", "OFFSETBATCH_DEPLOY_STATE": str(state)}
        self.url = f"http://127.0.0.1:{PORT}"
        self.t0 = time.monotonic()
        self.timeline: dict[str, float] = {}

    def mark(self, event: str) -> None:
        self.timeline[event] = round(time.monotonic() - self.t0, 1)

    def deploy(self, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
        res = subprocess.run([str(DEPLOY), *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        assert res.returncode == 0, f"scripts/deploy.sh {' '.join(args)}:\n{res.stdout[-4000:]}{res.stderr[-4000:]}"
        return res

    def secret(self, name: str) -> str:
        return dict(line.split("=", 1) for line in (self.state / "secrets.env").read_text().split())[name]

    @functools.cached_property
    def api(self) -> AirflowRest:
        """Airflow's REST API as admin, with the password deploy.sh generated."""
        return AirflowRest(self.url, "admin", self.secret("AIRFLOW_ADMIN_PASSWORD"))

    def containers(self) -> dict[str, tuple[str, str]]:
        """service -> (container id, status) of the project's containers, stopped ones too."""
        out = docker("ps", "-a", "--filter", f"label=com.docker.compose.project={PROJECT}",
                     "--format", '{{.ID}}\t{{.Label "com.docker.compose.service"}}\t{{.Status}}')
        return {svc: (cid, status) for cid, svc, status in (line.split("\t") for line in out.splitlines() if line)}

    def container(self, service: str) -> str:
        return self.containers()[service][0]

    def produce(self, first: int, count: int) -> None:
        res = subprocess.run(["docker", "exec", "-i", self.container("airflow-scheduler"), "python", "-",
                              TOPIC, str(first), str(count)], input=PRODUCER, capture_output=True, text=True,
                             timeout=300)
        assert res.returncode == 0, f"producing {count} records failed:\n{res.stdout[-2000:]}{res.stderr[-3000:]}"

    def trigger(self, run_id: str) -> None:
        status, body = self.api.rest("POST", f"/api/v2/dags/{DAG}/dagRuns", {"dag_run_id": run_id, "logical_date": None})
        assert status == 200, f"triggering {run_id}: {status} {body}"

    def run_state(self, run_id: str) -> str:
        status, body = self.api.rest("GET", f"/api/v2/dags/{DAG}/dagRuns/{run_id}")
        assert status == 200, body
        return body["state"]

    def wait(self, what: str, ready, timeout: float = 900, every: float = 2.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = ready()
            if value:
                return value
            time.sleep(every)  # poll interval of a condition checked each time
        raise AssertionError(f"{what}: not within {timeout:.0f} s\n{self.diagnostics()}")

    def wait_for_run(self, run_id: str) -> str:
        state = self.wait(f"run {run_id} finishing",
                          lambda: (s := self.run_state(run_id)) in ("success", "failed") and s)
        self.mark(f"run {run_id} {state}")
        return state

    def output_ids(self, into: Path) -> list[str]:
        """The table's event ids, copied out of the shared volume and read with pyarrow (Hive
        partition folders, the hidden _offsetbatch/ bookkeeping skipped)."""
        shutil.rmtree(into, ignore_errors=True)
        docker("cp", f"{self.container('airflow-scheduler')}:{TABLE}", str(into))
        table = ds.dataset(str(into), format="parquet", partitioning="hive",
                           ignore_prefixes=["_", "."]).to_table(columns=["event_id"])
        return table.column("event_id").to_pylist()

    def diagnostics(self) -> str:
        containers = self.containers()
        lines = [f"{svc}: {status}" for svc, (_, status) in sorted(containers.items())]
        failed = [svc for svc, (_, status) in containers.items() if status.startswith("Exited") and
                  not status.startswith("Exited (0)")]
        for svc in [*failed, *(s for s in ("airflow-scheduler", "spark-connect") if s in containers)]:
            logs = subprocess.run(["docker", "logs", "--tail", "40", containers[svc][0]],
                                  capture_output=True, text=True)
            lines.append(f"--- {svc} log tail ---\n{logs.stdout[-3000:]}{logs.stderr[-3000:]}")
        return "\n".join(lines)


def docker(*args: str) -> str:
    res = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"docker {' '.join(args)}: {res.stderr[-2000:]}"
    return res.stdout


def _up_with_timeline(stack: Stack) -> None:
    """`deploy.sh up`, watching the containers once a second: when each one-shot service exited 0
    and each long-running one was healthy (or up, where it has no health check)."""
    proc = subprocess.Popen([str(DEPLOY), "up"], env=stack.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    while proc.poll() is None:
        for svc, (_, status) in stack.containers().items():
            done = (status.startswith("Exited (0)") if svc in ONE_SHOT
                    else "(healthy)" in status or (status.startswith("Up") and "health" not in status))
            if done and f"{svc} ready" not in stack.timeline:
                stack.mark(f"{svc} ready")
        time.sleep(1)  # sampling interval of the timeline
    out = proc.stdout.read()
    assert proc.returncode == 0, f"scripts/deploy.sh up:\n{out[-6000:]}\n{stack.diagnostics()}"
    stack.mark("deploy.sh up returned (Airflow API answers)")

    def components_healthy() -> bool:
        """Airflow's own view: the health endpoint reports each component's last heartbeat."""
        with urllib.request.urlopen(f"{stack.url}/api/v2/monitor/health", timeout=10) as resp:
            health = json.loads(resp.read())
        for name in ("metadatabase", "scheduler", "triggerer", "dag_processor"):
            if (health.get(name) or {}).get("status") == "healthy" and f"airflow {name} healthy" not in stack.timeline:
                stack.mark(f"airflow {name} healthy")
        return all((health.get(n) or {}).get("status") == "healthy" for n in ("scheduler", "triggerer", "dag_processor"))

    stack.wait("Airflow's scheduler, triggerer and dag-processor heartbeating", components_healthy, timeout=300,
               every=1.0)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("deploy"))
    s.deploy("down")  # a previous, interrupted run of this test
    s.deploy("build")
    s.mark("images built (engine, base, offsetbatch, kafka, postgres)")
    sizes = {img: int(docker("image", "inspect", "-f", "{{.Size}}", img).strip()) // 2**20 for img in (
        "offsetbatch:0.1.0", "offsetbatch/kafka:4.1.1-debian", "offsetbatch/postgres:15-debian", "debian:bookworm-slim")}
    s.timeline["image sizes MiB"] = sizes  # type: ignore[assignment]
    s.t0 = time.monotonic()  # the services' times count from `up`
    try:
        _up_with_timeline(s)
        yield s
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "deploy-timeline.json").write_text(json.dumps(s.timeline, indent=1))
        subprocess.run([str(DEPLOY), "down"], env=s.env, capture_output=True, timeout=600)


def test_the_sample_pipeline_lands_every_record_once_through_a_broker_and_worker_kill(stack, tmp_path):
    stack.produce(0, 20_000)
    status, body = stack.api.rest("PATCH", f"/api/v2/dags/{DAG}?update_mask=is_paused", {"is_paused": False})
    assert status == 200, body
    stack.trigger("deploy-1")
    assert stack.wait_for_run("deploy-1") == "success", stack.diagnostics()
    stack.api.wait_for_runs(DAG, 1)  # unpausing also queued the latest hourly interval
    ids = stack.output_ids(tmp_path / "t1")
    produced = {f"e-{i:08d}" for i in range(20_000)}
    assert len(ids) == len(produced) and set(ids) == produced, "first run: every record exactly once"

    # A batch big enough to be mid-write when both kills land.
    stack.produce(20_000, 300_000)
    stack.trigger("deploy-2")
    staging = f"{TABLE}/_offsetbatch/attempts"
    worker = stack.container("spark-worker")
    stack.wait("the killed run's job writing its first staged file", lambda: subprocess.run(
        ["docker", "exec", worker, "bash", "-c", f"compgen -G '{staging}/batch_id=*/attempt=*/data/_temporary'"],
        capture_output=True).returncode == 0, timeout=600, every=0.2)
    stack.mark("deploy-2 writing: docker kill kafka-2 and spark-worker")
    docker("kill", stack.container("kafka-2"), worker)
    stack.wait("the master noticing the dead worker", lambda: json.loads(urllib.request.urlopen(
        f"http://127.0.0.1:{PORT + 1}/json/", timeout=10).read())["aliveworkers"] == 0, timeout=120, every=0.5)
    docker("start", stack.container("kafka-2"), worker)
    stack.mark("kafka-2 and spark-worker started again")
    killed = stack.wait_for_run("deploy-2")

    stack.produce(320_000, 5_000)
    stack.trigger("deploy-3")
    assert stack.wait_for_run("deploy-3") == "success", stack.diagnostics()
    runs = stack.api.wait_for_runs(DAG, 3)
    ids = stack.output_ids(tmp_path / "t2")
    counts = Counter(ids)
    produced = {f"e-{i:08d}" for i in range(325_000)}
    duplicates = {k: v for k, v in counts.items() if v > 1}
    missing = produced - set(counts)
    assert not duplicates and not missing and set(counts) == produced, (
        f"after the kill ({killed}) and the rerun: {len(duplicates)} duplicated, {len(missing)} missing of "
        f"{len(produced)}; runs {[(r['dag_run_id'], r['state']) for r in runs]}")
    stack.timeline["records checked"] = len(ids)  # type: ignore[assignment]


def test_the_ui_plugin_pages_open_through_the_api_server(stack):
    status, pipelines = stack.api.rest("GET", "/offsetbatch/api/pipelines")
    assert status == 200, pipelines
    names = {p["name"] for p in pipelines["pipelines"]}
    assert {"sample_events", "sample_events_postgres", "sample_events_iceberg"} <= names, names
    for page in ("/offsetbatch/", f"/offsetbatch/dags/{DAG}"):
        status, html = stack.api.rest("GET", page)
        assert status == 200 and "sample_events" in html, (page, status, html[:500])
    assert stack.api.rest("GET", "/offsetbatch/api/pipelines", token="not-a-jwt")[0] == 403, "the pages need a login"
    status, plugins = stack.api.rest("GET", "/api/v2/plugins")
    assert status == 200 and "offsetbatch" in {p["name"] for p in plugins["plugins"]}, plugins


def test_down_leaves_nothing_running(stack):
    stack.deploy("down")
    stack.mark("down -v returned")
    label = f"label=com.docker.compose.project={PROJECT}"
    assert docker("ps", "-a", "-q", "--filter", label).split() == []
    assert docker("volume", "ls", "-q", "--filter", label).split() == []
    assert docker("network", "ls", "-q", "--filter", label).split() == []
