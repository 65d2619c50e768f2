"""The container deployment, started and proven: docker-compose.yaml's whole stack, built from the
repository's Dockerfile (the offsetbatch wheel inside) by scripts/deploy.sh, exactly as the README's
"Deploying" section runs it, plus tests/deploy/deploytest.compose.yaml (a pipeline pinned to the
three workers, fault hooks, a 5-second Celery visibility timeout, the ledger on a loopback port).

Real Docker Engine (Debian's docker.io, started by the script when missing), real images: the base
`debian:bookworm-slim` is made with debootstrap when it cannot be pulled, and so are the Kafka,
PostgreSQL and Redis images (OFFSETBATCH_LOCAL_UPSTREAM=1: scripts/docker/kafka from Maven Central's
broker artifacts, scripts/docker/postgres and scripts/docker/redis from Debian's packages) because
no registry is reachable here; everything else is what a user builds. Three SASL_SSL brokers,
PostgreSQL, Redis, Airflow's api-server, scheduler, dag-processor and triggerer on the
CeleryExecutor with three Celery workers, a Spark master with two workers and a Spark Connect server.

The faults of a distributed executor, each followed by runs and a record-by-record check of the
table (read out of the shared volume with pyarrow, not offsetbatch) and of the ledger's contiguity:
a run whose three tasks run on three workers; a Celery worker killed while its commit holds the
ledger lock, then again after the ledger transaction and before publication; a Kafka broker, a
Spark worker and Celery's broker (Redis) lost while a job writes; the scheduler killed mid-run; and,
all along, every task that outlives the visibility timeout delivered again to another worker. The
UI plugin's pages open through the api-server, and `down -v` leaves nothing behind. The timeline
(each service ready at t+s, the runs, the faults) goes to tests/artifacts/deploy-timeline.json.
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
import sqlalchemy as sa

from harness import AirflowRest
from offsetbatch.ledger import Ledger
from offsetbatch_dev import PROJECT_ROOT
from offsetbatch_dev.verify import contiguity

pytestmark = pytest.mark.deploy

DEPLOY = PROJECT_ROOT / "scripts" / "deploy.sh"
OVERLAY = "tests/deploy/deploytest.compose.yaml"
PROJECT = "offsetbatch-deploytest"
PORT = 28080
PG_PORT = PORT + 5
SAMPLE, PINNED = "sample_events", "pinned_events"  # pinned: plan, spark_job, commit on workers 1, 2, 3
TOPIC = "sample-events"
WORKERS = ("airflow-worker-1", "airflow-worker-2", "airflow-worker-3")
REDELIVERED = "Task already running elsewhere, ignoring redelivered message"  # the Celery provider's line
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
    """scripts/deploy.sh with this test's project name, ports, overlay and state folder."""

    def __init__(self, state: Path):
        self.state = state
        self.env = {**os.environ, "COMPOSE_PROJECT_NAME": PROJECT, "AIRFLOW_PORT": str(PORT),
                    "SPARK_MASTER_UI_PORT": str(PORT + 1), "SPARK_WORKER_UI_PORT": str(PORT + 2),
                    "SPARK_WORKER_2_UI_PORT": str(PORT + 3), "DEPLOYTEST_POSTGRES_PORT": str(PG_PORT),
                    "COMPOSE_FILE": f"docker-compose.yaml:{OVERLAY}",
                    "OFFSETBATCH_LOCAL_UPSTREAM": "1", "OFFSETBATCH_DEPLOY_STATE": str(state)}
        self.url = f"http://127.0.0.1:{PORT}"
        self.t0 = time.monotonic()
        self.timeline: dict[str, object] = {}
        self.produced = 0

    def mark(self, event: str) -> None:
        self.timeline[event] = round(time.monotonic() - self.t0, 1)

    def deploy(self, *args: str, timeout: float = 1800, **env: str) -> subprocess.CompletedProcess:
        res = subprocess.run([str(DEPLOY), *args], env={**self.env, **env}, capture_output=True, text=True,
                             timeout=timeout)
        assert res.returncode == 0, f"scripts/deploy.sh {' '.join(args)}:\n{res.stdout[-4000:]}{res.stderr[-4000:]}"
        return res

    def recreate_worker(self, service: str, faults: str = "") -> None:
        """The Celery worker's container made again, with ``OFFSETBATCH_FAULTS`` = ``faults``."""
        self.deploy("compose", "up", "-d", "--no-deps", "--force-recreate", service, DEPLOYTEST_FAULTS=faults)
        self.mark(f"{service} recreated" + (f" with {faults}" if faults else ""))

    def secret(self, name: str) -> str:
        return dict(line.split("=", 1) for line in (self.state / "secrets.env").read_text().split())[name]

    @functools.cached_property
    def api(self) -> AirflowRest:
        """Airflow's REST API as admin, with the password deploy.sh generated."""
        return AirflowRest(self.url, "admin", self.secret("AIRFLOW_ADMIN_PASSWORD"))

    @functools.cached_property
    def ledger_url(self) -> str:
        return f"postgresql+psycopg2://ledger:ledger@127.0.0.1:{PG_PORT}/ledger"

    def containers(self) -> dict[str, tuple[str, str]]:
        """service -> (container id, status) of the project's containers, stopped ones too."""
        out = docker("ps", "-a", "--filter", f"label=com.docker.compose.project={PROJECT}",
                     "--format", '{{.ID}}\t{{.Label "com.docker.compose.service"}}\t{{.Status}}')
        return {svc: (cid, status) for cid, svc, status in (line.split("\t") for line in out.splitlines() if line)}

    def container(self, service: str) -> str:
        return self.containers()[service][0]

    def has_file(self, service: str, path: str) -> bool:
        return subprocess.run(["docker", "exec", self.container(service), "test", "-e", path],
                              capture_output=True).returncode == 0

    def produce(self, count: int) -> None:
        res = subprocess.run(["docker", "exec", "-i", self.container("airflow-scheduler"), "python", "-",
                              TOPIC, str(self.produced), str(count)], input=PRODUCER, capture_output=True, text=True,
                             timeout=300)
        assert res.returncode == 0, f"producing {count} records failed:\n{res.stdout[-2000:]}{res.stderr[-3000:]}"
        self.produced += count

    def trigger(self, pipeline: str, run_id: str) -> None:
        status, body = self.api.rest("POST", f"/api/v2/dags/offsetbatch_{pipeline}/dagRuns",
                                     {"dag_run_id": run_id, "logical_date": None})
        assert status == 200, f"triggering {run_id}: {status} {body}"
        self.mark(f"{run_id} triggered ({self.produced} records produced)")

    def run_state(self, pipeline: str, run_id: str) -> str:
        status, body = self.api.rest("GET", f"/api/v2/dags/offsetbatch_{pipeline}/dagRuns/{run_id}")
        assert status == 200, body
        return body["state"]

    def task_instances(self, pipeline: str, run_id: str) -> dict[str, dict]:
        status, body = self.api.rest("GET", f"/api/v2/dags/offsetbatch_{pipeline}/dagRuns/{run_id}/taskInstances")
        assert status == 200, body
        return {ti["task_id"]: ti for ti in body["task_instances"]}

    def wait(self, what: str, ready, timeout: float = 900, every: float = 2.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = ready()
            if value:
                return value
            time.sleep(every)  # poll interval of a condition checked each time
        raise AssertionError(f"{what}: not within {timeout:.0f} s\n{self.diagnostics()}")

    def wait_for_run(self, pipeline: str, run_id: str, timeout: float = 900) -> str:
        state = self.wait(f"run {run_id} finishing",
                          lambda: (s := self.run_state(pipeline, run_id)) in ("success", "failed") and s, timeout)
        self.mark(f"{run_id} {state}")
        return state

    def settle(self, pipeline: str) -> list[dict]:
        """Every run of the pipeline finished (hourly ones included), and the runs."""
        runs = self.api.runs(f"offsetbatch_{pipeline}")
        return self.api.wait_for_runs(f"offsetbatch_{pipeline}", len(runs))

    def output_ids(self, pipeline: str, into: Path) -> list[str]:
        """The table's event ids, copied out of the shared volume and read with pyarrow (Hive
        partition folders, the hidden _offsetbatch/ bookkeeping skipped)."""
        shutil.rmtree(into, ignore_errors=True)
        docker("cp", f"{self.container('airflow-scheduler')}:/opt/offsetbatch/state/tables/{pipeline}", str(into))
        table = ds.dataset(str(into), format="parquet", partitioning="hive",
                           ignore_prefixes=["_", "."]).to_table(columns=["event_id"])
        return table.column("event_id").to_pylist()

    def check_once(self, pipeline: str, into: Path, what: str) -> None:
        """Every record produced so far in the table exactly once, and the ledger's committed ranges
        contiguous from the start to the frontier."""
        runs = self.settle(pipeline)
        counts = Counter(self.output_ids(pipeline, into))
        produced = {f"e-{i:08d}" for i in range(self.produced)}
        duplicated = {k: v for k, v in counts.items() if v > 1}
        missing, extra = produced - set(counts), set(counts) - produced
        assert not duplicated and not missing and not extra, (
            f"{pipeline} after {what}: {len(duplicated)} duplicated, {len(missing)} missing, {len(extra)} unknown "
            f"of {len(produced)}; runs {[(r['dag_run_id'], r['state']) for r in runs]}")
        with Ledger(self.ledger_url) as ledger:
            assert contiguity(ledger, pipeline) == [], f"{pipeline} after {what}: the ledger is not contiguous"
            batches = ledger.list_batches(pipeline)
        self.timeline[f"{pipeline} checked after {what}"] = {
            "records": sum(counts.values()), "batches": [(b.batch_id, b.status, b.run_id) for b in batches]}

    def lock_held(self, pipeline: str) -> bool:
        """Whether a transaction holds the pipeline's ledger lock (its row FOR UPDATE): asked
        with NOWAIT, as the ledger itself asks first."""
        engine = sa.create_engine(self.ledger_url)
        try:
            with engine.begin() as conn:
                conn.execute(sa.text("SELECT name FROM ob_pipelines WHERE name = :n FOR UPDATE NOWAIT"),
                             {"n": pipeline})
            return False
        except sa.exc.OperationalError as exc:
            assert "could not obtain lock" in str(exc), exc
            return True
        finally:
            engine.dispose()

    def redeliveries(self) -> dict[str, int]:
        """Per worker, the task messages it was handed again while their task ran elsewhere (the
        Celery provider logs each and ignores it)."""
        out = {}
        for worker in WORKERS:
            logs = subprocess.run(["docker", "logs", self.container(worker)], capture_output=True, text=True)
            out[worker] = (logs.stdout + logs.stderr).count(REDELIVERED)
        return out

    def diagnostics(self) -> str:
        containers = self.containers()
        lines = [f"{svc}: {status}" for svc, (_, status) in sorted(containers.items())]
        failed = [svc for svc, (_, status) in containers.items() if status.startswith("Exited") and
                  not status.startswith("Exited (0)")]
        for svc in [*failed, *(s for s in ("airflow-scheduler", "spark-connect", *WORKERS) if s in containers)]:
            logs = subprocess.run(["docker", "logs", "--tail", "30", containers[svc][0]],
                                  capture_output=True, text=True)
            lines.append(f"--- {svc} log tail ---\n{logs.stdout[-2500:]}{logs.stderr[-2500:]}")
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
    t0 = time.monotonic()
    s.deploy("build")
    s.timeline["images built s"] = round(time.monotonic() - t0, 1)
    sizes = {img: int(docker("image", "inspect", "-f", "{{.Size}}", img).strip()) // 2**20 for img in (
        "offsetbatch:0.1.0", "offsetbatch/kafka:4.1.1-debian", "offsetbatch/postgres:15-debian",
        "offsetbatch/redis:7-debian", "debian:bookworm-slim")}
    s.timeline["image sizes MiB"] = sizes
    s.t0 = time.monotonic()  # the services' times count from `up`
    try:
        _up_with_timeline(s)
        yield s
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "deploy-timeline.json").write_text(json.dumps(s.timeline, indent=1))
        subprocess.run([str(DEPLOY), "down"], env=s.env, capture_output=True, timeout=600)


def test_a_run_on_three_workers_passes_nothing_through_a_workers_disk(stack, tmp_path):
    """pinned_events runs its plan on worker 1, its job on worker 2, its commit on worker 3: the spec,
    the staged files and the manifest reach the next task through the shared state volume, the plan
    and the attempt through XCom, the secrets through the Connect session. The sample pipeline runs
    beside it on whichever workers take its tasks."""
    stack.produce(20_000)
    for pipeline in (SAMPLE, PINNED):
        status, body = stack.api.rest("PATCH", f"/api/v2/dags/offsetbatch_{pipeline}?update_mask=is_paused",
                                      {"is_paused": False})
        assert status == 200, body
        stack.trigger(pipeline, f"{pipeline}-1")
    for pipeline in (SAMPLE, PINNED):
        assert stack.wait_for_run(pipeline, f"{pipeline}-1") == "success", stack.diagnostics()
    tis = stack.task_instances(PINNED, f"{PINNED}-1")
    hosts = {task: tis[task]["hostname"] for task in ("plan", "spark_job", "commit")}
    stack.timeline["pinned_events-1 hosts"] = hosts
    assert [h.split(".")[0] for h in hosts.values()] == list(WORKERS), hosts
    for pipeline in (SAMPLE, PINNED):
        stack.check_once(pipeline, tmp_path / pipeline, "the first runs")


def test_a_worker_killed_holding_the_ledger_lock_and_again_mid_commit(stack, tmp_path):
    """The commit's worker (worker 3) killed twice, as a lost host dies: first inside the ledger
    transaction, holding the pipeline's lock; then, on the retry, after the transaction committed
    and before the output is published. The lock goes with the dead connection, Airflow fails the
    task when its heartbeat stops, and the third try rolls the committed batch forward."""
    worker = "airflow-worker-3"
    stack.produce(5_000)
    stack.recreate_worker(worker, "commit.in_transaction:pause")
    stack.trigger(PINNED, f"{PINNED}-2")
    stack.wait("the commit paused inside its ledger transaction",
               lambda: stack.has_file(worker, "/tmp/commit.in_transaction.paused"), timeout=600, every=0.5)
    assert stack.lock_held(PINNED), "the commit holds the pipeline's ledger lock"
    docker("kill", stack.container(worker))
    stack.mark(f"{worker} killed holding the ledger lock")
    stack.wait("PostgreSQL releasing the dead worker's lock", lambda: not stack.lock_held(PINNED), timeout=120,
               every=0.5)
    stack.mark("the ledger lock released")

    stack.recreate_worker(worker, "commit.after_transaction:pause")
    stack.wait("the retried commit paused after its ledger transaction",
               lambda: stack.has_file(worker, "/tmp/commit.after_transaction.paused"), timeout=600, every=0.5)
    with Ledger(stack.ledger_url) as ledger, ledger.reading() as conn:
        batch = ledger.batch_for_run(conn, PINNED, f"{PINNED}-2")
    assert batch is not None and batch.status == "committed", batch
    unpublished = len(stack.output_ids(PINNED, tmp_path / "mid"))
    assert unpublished == stack.produced - 5_000, "the batch is committed in the ledger, not yet in the table"
    docker("kill", stack.container(worker))
    stack.mark(f"{worker} killed after the ledger transaction (batch {batch.batch_id} committed, not published)")

    stack.recreate_worker(worker)
    assert stack.wait_for_run(PINNED, f"{PINNED}-2") == "success", stack.diagnostics()
    commit = stack.task_instances(PINNED, f"{PINNED}-2")["commit"]
    stack.timeline["pinned_events-2 commit tries"] = commit["try_number"]
    assert commit["try_number"] == 3 and commit["state"] == "success", commit
    stack.check_once(PINNED, tmp_path / "after", "a worker killed holding the lock and mid-commit")

    stack.produce(1_000)  # the next run, on the three workers again
    stack.trigger(PINNED, f"{PINNED}-3")
    assert stack.wait_for_run(PINNED, f"{PINNED}-3") == "success", stack.diagnostics()
    stack.check_once(PINNED, tmp_path / "next", "the next run")


def test_a_kafka_broker_a_spark_worker_and_celerys_broker_lost_while_a_job_writes(stack, tmp_path):
    """While the sample pipeline's job writes a 300,000-record batch: kafka-2 and spark-worker-1
    killed (the job loses that worker's executor), Redis (Celery's broker) restarted. Tasks outliving the visibility timeout were handed
    to other workers too (the overlay's 5 s): Airflow's execution API refuses a second start."""
    stack.produce(300_000)
    stack.trigger(SAMPLE, f"{SAMPLE}-2")
    staging = f"/opt/offsetbatch/state/tables/{SAMPLE}/_offsetbatch/attempts"
    spark_worker = stack.container("spark-worker-1")
    stack.wait("the job writing its first staged file", lambda: subprocess.run(
        ["docker", "exec", spark_worker, "bash", "-c", f"compgen -G '{staging}/batch_id=*/attempt=*/data/_temporary'"],
        capture_output=True).returncode == 0, timeout=600, every=0.2)
    stack.mark(f"{SAMPLE}-2 writing: docker kill kafka-2 and spark-worker-1, docker restart redis")
    docker("kill", stack.container("kafka-2"), spark_worker)
    docker("restart", stack.container("redis"))
    stack.mark("redis restarted")
    stack.wait("the master noticing the dead worker", lambda: json.loads(urllib.request.urlopen(
        f"http://127.0.0.1:{PORT + 1}/json/", timeout=10).read())["aliveworkers"] == 1, timeout=120, every=0.5)
    docker("start", stack.container("kafka-2"), spark_worker)
    stack.mark("kafka-2 and spark-worker-1 started again")
    stack.timeline[f"{SAMPLE}-2 state"] = stack.wait_for_run(SAMPLE, f"{SAMPLE}-2")
    server = subprocess.run(["docker", "logs", stack.container("spark-connect")], capture_output=True, text=True)
    lost = [line[-300:] for line in (server.stdout + server.stderr).splitlines() if "Lost executor" in line]
    stack.timeline["the Connect server's log on the lost worker"] = lost[:4]
    assert lost, "the Spark worker's kill cost the job an executor (the Connect server's driver logs it)"

    stack.produce(5_000)
    stack.trigger(SAMPLE, f"{SAMPLE}-3")
    assert stack.wait_for_run(SAMPLE, f"{SAMPLE}-3") == "success", stack.diagnostics()
    stack.check_once(SAMPLE, tmp_path / "t", "a broker, a Spark worker and Redis lost mid-job")
    redelivered = stack.redeliveries()
    stack.timeline["redelivered so far"] = redelivered
    assert sum(redelivered.values()) >= 1, f"no task was delivered twice: {redelivered}"


def test_the_scheduler_killed_mid_run(stack, tmp_path):
    """The scheduler SIGKILLed while the run's job is on a worker, started again: it adopts the
    task the workers still run, and the run ends once."""
    stack.produce(5_000)
    stack.trigger(SAMPLE, f"{SAMPLE}-4")
    stack.wait("the job task running", lambda: stack.task_instances(SAMPLE, f"{SAMPLE}-4").get(
        "spark_job", {}).get("state") == "running", timeout=600, every=0.5)
    docker("kill", stack.container("airflow-scheduler"))
    stack.mark("airflow-scheduler killed")
    docker("start", stack.container("airflow-scheduler"))
    stack.mark("airflow-scheduler started again")
    assert stack.wait_for_run(SAMPLE, f"{SAMPLE}-4") == "success", stack.diagnostics()
    stack.check_once(SAMPLE, tmp_path / "t", "the scheduler killed")
    stack.produce(1_000)
    stack.trigger(SAMPLE, f"{SAMPLE}-5")
    assert stack.wait_for_run(SAMPLE, f"{SAMPLE}-5") == "success", stack.diagnostics()
    stack.check_once(SAMPLE, tmp_path / "next", "the next run")
    stack.timeline["redelivered task messages per worker, in all"] = stack.redeliveries()


def test_the_ui_plugin_pages_open_through_the_api_server(stack):
    status, pipelines = stack.api.rest("GET", "/offsetbatch/api/pipelines")
    assert status == 200, pipelines
    names = {p["name"] for p in pipelines["pipelines"]}
    assert {"sample_events", "sample_events_postgres", "sample_events_iceberg", PINNED} <= names, names
    for page in ("/offsetbatch/", f"/offsetbatch/dags/offsetbatch_{SAMPLE}"):
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
