"""A pipeline under test: its YAML config, a thin DAG file, its topic, ledger and table, and
helpers to produce records and run real Airflow DAG runs (real broker; Spark via spark-submit, or on
the suite's Spark Connect server in modules marked ``spark_connect``). Every config it writes names
its ``spark.runner``: the default runner (connect) never turns a spark-submit test into another one."""

from __future__ import annotations

import atexit
import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

from offsetbatch.config import load_config
from offsetbatch.ledger import Ledger
from offsetbatch_dev import verify
from offsetbatch_dev.sample.producer import ProduceResult, produce
from offsetbatch_dev.stack import airflow_services
from offsetbatch_dev.stack.airflow_services import AirflowRest  # noqa: F401 - the tests' import path

HELPER = Path(__file__).parent / "helpers" / "run_dag.py"


class DagRunner:
    """One long-lived ``run_dag.py --serve`` process per pytest worker, which forks a warm copy of
    itself per run, for the runs it can take: those under the suite's Airflow settings (``serve``;
    ``AIRFLOW__*`` are read once, at import), one at a time (runs a test starts side by side each
    need their own process). The others go to a fresh ``run_dag.py`` process, as every run did
    before. Airflow commands of the fixtures and tests (``cli``) fork from it too."""

    TIMEOUT_S = 600

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._settings: dict | None = None
        self._env_at_serve: dict = {}
        self._busy = threading.Lock()

    @staticmethod
    def settings(env: dict) -> dict:
        return {k: v for k, v in env.items() if k.startswith("AIRFLOW__")}

    def serve(self, env: dict) -> None:
        """Take the runs under ``env``'s Airflow settings (the suite's ``airflow_env``)."""
        self._settings, self._env_at_serve = self.settings(env), dict(env)

    def run(self, request: dict, env: dict, log: Path) -> int | None:
        """The run's exit code, or None when this runner cannot take it (then run it in a process)."""
        if self._settings != self.settings(env):
            return None  # a module's own settings (lineage)
        return self._send(request, env, log)

    # What an Airflow command reads once, at import: its home (airflow.cfg), metadata DB and DAG
    # folder. Every other setting it reads from the environment when it needs it, and the fork has
    # the command's environment.
    IMPORT_TIME = ("AIRFLOW_HOME", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CORE__DAGS_FOLDER")

    def cli(self, argv: list[str], env: dict, timeout_s: float = 300) -> subprocess.CompletedProcess:
        """``airflow ARGV`` under ``env``: in a fork of the warm runner when it serves this Airflow
        (the CLI's own parser and command, without a new interpreter importing Airflow: 2-8 s of CPU
        a call on 2-core hosts), else in a new ``airflow`` process."""
        import tempfile

        served = self._settings is not None and all(
            env.get(k) == self._env_at_serve.get(k) for k in self.IMPORT_TIME)
        if served:
            with tempfile.TemporaryDirectory(prefix="airflow-cli-") as tmp:
                out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
                rc = self._send({"argv": argv, "err": str(err)}, env, out)
                if rc is not None:
                    return subprocess.CompletedProcess(["airflow", *argv], rc, out.read_text(errors="replace"),
                                                       err.read_text(errors="replace") if err.exists() else "")
        return subprocess.run(["airflow", *argv], env=env, capture_output=True, text=True, timeout=timeout_s)

    def _send(self, request: dict, env: dict, log: Path) -> int | None:
        if not self._busy.acquire(blocking=False):
            return None  # a run beside the one going
        try:
            if self._proc is not None and self._proc.poll() is not None:
                self._proc = None
            if self._proc is None:
                self._proc = subprocess.Popen([sys.executable, str(HELPER), "--serve"], env=self._env_at_serve, text=True,
                                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                              start_new_session=True)  # its forks and their Spark: one group
            self._proc.stdin.write(json.dumps({**request, "env": env, "log": str(log)}) + "\n")
            self._proc.stdin.flush()
            return self._answer()
        finally:
            self._busy.release()

    def _answer(self) -> int:
        timer = threading.Timer(self.TIMEOUT_S, self.stop)  # a hung run fails the test, not the suite
        timer.start()
        try:
            for line in self._proc.stdout:
                if "RESULT " in line:  # a line of a background thread's may have come first
                    return int(line.rsplit("RESULT ", 1)[1])
        finally:
            timer.cancel()
        self._proc = None  # it died or was stopped mid-run; the next run starts a new one
        return 1

    def stop(self) -> None:
        """Kill the runner, the run it is forking and that run's own processes (spark-submit)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


RUNNER = DagRunner()
atexit.register(RUNNER.stop)


class AirflowServices(airflow_services.AirflowServices):
    """The stack's Airflow services, whose CLI calls (``unpause``, ``backfill create``, ...) run in
    the suite's warm Airflow process (``RUNNER.cli``) when it serves their metadata DB."""

    def run_cli(self, argv: list[str]) -> subprocess.CompletedProcess:
        return RUNNER.cli(argv, self.env)


def worker_port(base: int) -> int:
    """``base`` without pytest-xdist or on its first worker, ``base + 1000 * n`` on worker ``gw<n>``:
    each worker runs its own broker, PostgreSQL and Airflow servers (``make test`` runs two)."""
    return base + 1000 * int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
# The Airflow connection of the suite's shared Spark Connect server (conftest.spark_connect_server),
# which the pipelines of modules marked ``spark_connect`` run their jobs on: the connection a
# pipeline on the default runner uses, so those pipelines leave connect_conn_id unset.
CONNECT_CONN_ID = "spark_connect_default"
SCHEMA = "event_id STRING, kind STRING, user_id INT, page STRING, event_time TIMESTAMP, amount DOUBLE"
# Small batches on 2 cores: few shuffle partitions, and only the JVM's quick (C1) compiler, whose
# code is ready sooner than the optimizing one's for jobs of a few seconds (not a production setting:
# a 1,000-record job took 16 s instead of 30 s with it; the cluster variants give it to the
# executors too).
SPARK_TEST_CONF = {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
                   "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


@dataclass
class RunOutcome:
    ok: bool
    output: str
    run_after: datetime

    def assert_failed_with(self, text: str) -> None:
        assert not self.ok, "the run was expected to fail"
        assert text in self.output, f"expected {text!r} in the run's output; tail:\n{self.output[-4000:]}"


@dataclass
class Pipeline:
    name: str
    topic: str
    env: dict
    root: Path
    bootstrap: str
    ledger_url: str
    overrides: dict = field(default_factory=dict)
    produced: dict[tuple[int, int], str | None] = field(default_factory=dict)
    runs: int = 0
    producer_kwargs: dict = field(default_factory=dict)  # kafka-python settings of a secured broker's admin

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.table = str(self.root / "table")
        cfg = {
            "name": self.name,
            "kafka": {"conn_id": "kafka_default", "topics": [self.topic]},
            "starting_policy": "earliest",
            "value": {"format": "json", "schema": SCHEMA, "required": ["event_id", "kind", "event_time"]},
            "transform": {"sql": "SELECT event_id, kind, user_id, event_time, kafka_partition, kafka_offset FROM records"},
            "sink": {"path": self.table, "event_time_column": "event_time"},
            "ledger": {"url": self.ledger_url},
            "spark": {"conf": SPARK_TEST_CONF},
            "airflow": {"retries": 0},
        }
        for key, value in self.overrides.items():
            cfg[key] = {**cfg[key], **value} if isinstance(cfg.get(key), dict) else value
        if isinstance(cfg.get("spark"), dict) and "runner" not in cfg["spark"]:
            cfg["spark"]["runner"] = "connect" if cfg["spark"].get("connect_conn_id") else "spark-submit"
        self.config_path = self.root / f"{self.name}.yaml"
        self.config_path.write_text(yaml.safe_dump(cfg))
        self.dag_file = Path(self.env["AIRFLOW__CORE__DAGS_FOLDER"]) / f"{self.name}.py"
        self.dag_file.write_text(
            "# Airflow DAG under test\nfrom offsetbatch.dag.factory import pipeline_dag\n\n"
            f"dag = pipeline_dag({str(self.config_path)!r})\n"
        )
        self.cfg = load_config(self.config_path)
        self.ledger = Ledger(self.ledger_url, create=True)

    @property
    def dag_id(self) -> str:
        return self.cfg.dag_id

    def produce(self, records: int, start: datetime, hours: int = 1, partitions: int = 2,
                malformed_fraction: float = 0.02) -> ProduceResult:
        result = produce(self.bootstrap, self.topic, records, partitions=partitions, start=start, hours=hours,
                         malformed_fraction=malformed_fraction, seed=len(self.produced) + 1,
                         id_prefix=f"{self.name}-{len(self.produced)}-", progress=False,
                         client_kwargs=self.producer_kwargs or None)
        self.produced.update(result.offsets)
        return result

    def run(self, logical_date: datetime | None, run_after: datetime | None = None,
            faults: str | None = None, cli: bool = False, conf: dict | None = None,
            own_process: bool = False) -> RunOutcome:
        """One DAG run. Same ``run_after`` (and logical date) = the same Airflow run, re-executed.
        ``conf`` is what the Trigger DAG form sends (the DAG's params). ``own_process``: not on the
        warm ``RUNNER``, for runs a test starts side by side that must start alike to overlap."""
        self.runs += 1
        run_after = run_after or datetime(2030, 1, 1, tzinfo=timezone.utc) + timedelta(minutes=self.runs)
        env = dict(self.env)
        if faults:
            env["OFFSETBATCH_FAULTS"] = faults
        (self.root / "runs").mkdir(exist_ok=True)
        log = self.root / "runs" / f"{run_after:%Y%m%dT%H%M%S}-{logical_date and logical_date.isoformat()}.log"
        args = {"dag_file": str(self.dag_file), "dag_id": self.dag_id,
                "logical": logical_date.isoformat() if logical_date else "none", "run_after": run_after.isoformat(),
                "conf": conf or {}}
        rc = None if cli or own_process else RUNNER.run(args, env, log)
        if rc is None:
            if cli:
                cmd = ["airflow", "dags", "test", self.dag_id, logical_date.isoformat()]
            else:
                cmd = [sys.executable, str(HELPER), *(args[k] for k in ("dag_file", "dag_id", "logical", "run_after")),
                       json.dumps(args["conf"])]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
            log.write_text(proc.stdout + proc.stderr)
            rc = proc.returncode
        out = log.read_text(errors="replace") if log.exists() else "(no output: the DAG runner died before the run)"
        ok = rc == 0 and "DagRunState.FAILED" not in out and "state=failed" not in out
        return RunOutcome(ok, out, run_after)

    def connect(self, conn_id: str, extra: dict, login: str | None = None, password: str | None = None) -> None:
        """Define Airflow connection ``conn_id`` (``AIRFLOW_CONN_<ID>``, as a secrets backend would
        hand it over) for this pipeline's runs and CLI calls, and point ``kafka.conn_id`` at it."""
        conn = {"conn_type": "kafka", "extra": extra, **({"login": login} if login else {}),
                **({"password": password} if password else {})}
        self.env = {**self.env, f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(conn)}
        cfg = yaml.safe_load(self.config_path.read_text())
        cfg["kafka"]["conn_id"] = conn_id
        self.config_path.write_text(yaml.safe_dump(cfg))
        self.cfg = load_config(self.config_path)

    def register(self) -> None:
        """Serialize the DAG (and its Asset) into Airflow's metadata DB, as a running dag-processor
        would have before any run; ``dags test`` otherwise does it on first use, racily."""
        for argv in (["dags", "reserialize"], ["pools", "set", self.cfg.pool, "1", f"offsetbatch pipeline {self.name}"]):
            proc = RUNNER.cli(argv, self.env)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    def expected_ids(self, lost: set[tuple[int, int]] = frozenset()) -> set[str]:
        return {i for po, i in self.produced.items() if i is not None and po not in lost}

    def malformed(self, lost: set[tuple[int, int]] = frozenset()) -> list[tuple[int, int]]:
        return [po for po, i in self.produced.items() if i is None and po not in lost]

    def check(self, lost: set[tuple[int, int]] = frozenset()) -> verify.Report:
        return verify.check(self.table, self.expected_ids(lost), self.malformed(lost), self.ledger, self.name)

    def snapshot(self) -> dict:
        """Everything a rerun must leave unchanged: ledger rows and published files."""
        batches = [(b.batch_id, b.status, [str(r) for r in b.ranges], b.stats.get("rows_out"))
                   for b in self.ledger.list_batches(self.name, 1000)]
        files = sorted(str(p.relative_to(self.table)) for p in Path(self.table).rglob("*.parquet")
                       if not str(p.relative_to(self.table)).startswith("_offsetbatch"))
        return {"batches": batches, "frontier": self.ledger.frontier_rows(self.name), "files": files,
                "gaps": self.ledger.list_gaps(self.name)}

    def ledger_digest(self) -> str:
        """A digest of every row of every ledger table (the SQLite dump, WAL included): the file's
        own bytes change when SQLite checkpoints its WAL, not only when a row does."""
        import hashlib
        import sqlite3

        con = sqlite3.connect(self.ledger_url.removeprefix("sqlite:///"))
        try:
            return hashlib.sha256("\n".join(con.iterdump()).encode()).hexdigest()
        finally:
            con.close()

    def describe(self) -> str:
        return json.dumps([(b.batch_id, b.status, b.describe_ranges()) for b in self.ledger.list_batches(self.name, 50)])


def sample_sink(kind: str) -> dict:
    """The bundled sample pipeline's sink settings for ``kind`` without its root (``path`` or
    ``staging``): the harness puts every pipeline's files under the test's own folder."""
    from offsetbatch.config import PIPELINES_DIR
    sample = yaml.safe_load((PIPELINES_DIR / kind / f"sample_events_{kind}.yaml").read_text())
    return {k: v for k, v in sample["sink"].items() if k not in ("path", "staging")}


# The registry formats the suite runs end to end, by the short name tests parametrize with: the
# pipeline's value.format and the sample module whose EVENT_V1/EVENT_V2, MALFORMED, referrer_of and
# encoder (``Events``) write the sample events the way that format's producers do.
REGISTRY_FORMATS = {"avro": ("confluent-avro", "offsetbatch_dev.sample.avro_events", "AvroEvents"),
                    "protobuf": ("confluent-protobuf", "offsetbatch_dev.sample.protobuf_events", "ProtobufEvents")}


def sample_events(kind: str = "avro"):
    """The sample module of registry format ``kind`` ("avro", "protobuf")."""
    import importlib

    return importlib.import_module(REGISTRY_FORMATS[kind][1])


def avro_pipeline(make_pipeline, registry_url: str, version: int | str = 1, kind: str = "avro",
                  **overrides) -> Pipeline:
    """A confluent-avro (``kind`` "protobuf": confluent-protobuf) pipeline under test (reader:
    ``<topic>-value`` at ``version``) whose runs reach the schema registry at ``registry_url`` through
    the ``schema_registry_default`` connection."""
    value = {"format": REGISTRY_FORMATS[kind][0], "schema": None, "required": ["event_id", "kind", "event_time"],
             "schema_registry": {"conn_id": "schema_registry_default", "version": version}}
    p = make_pipeline(value=value, **{"transform": {"sql": None}, **overrides})
    p.env = {**p.env, "AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT": json.dumps({"conn_type": "http", "host": registry_url})}
    return p


def set_reader_version(p: Pipeline, version: int | str) -> None:
    """Point the pipeline's reader schema at another version of its subject (the next runs read it)."""
    cfg = yaml.safe_load(p.config_path.read_text())
    cfg["value"]["schema_registry"]["version"] = version
    p.config_path.write_text(yaml.safe_dump(cfg))
    p.cfg = load_config(p.config_path)


def produce_avro(p: Pipeline, registry_url: str, schema: str, form: str, records: int, seed: int,
                 start: datetime, kind: str = "avro") -> dict[str, dict]:
    """Produce with confluent-kafka's own AvroSerializer (``form``: prefix or header; ``kind``
    "protobuf": Confluent's Protobuf framing, ``sample.protobuf_events``), 5 % of the records
    malformed (the sample module's ``MALFORMED``); returns the events by id, as they were before
    encoding."""
    module = sample_events(kind)
    serializer, by_id = getattr(module, REGISTRY_FORMATS[kind][2])(registry_url, p.topic, schema, form), {}

    def encoder(event: dict) -> tuple[bytes, list[tuple[str, bytes]]]:
        by_id[event["event_id"]] = event
        return serializer(event)

    result = produce(p.bootstrap, p.topic, records, partitions=2, start=start, hours=1, malformed_fraction=0.05,
                     seed=seed, id_prefix=f"{p.name}-{seed}-", progress=False, encoder=encoder,
                     malformed_values=module.MALFORMED)
    p.produced.update(result.offsets)
    return by_id


def cluster_pipeline(make_pipeline, spark, kafka=None, suffix: str = "_c") -> Pipeline:
    """A pipeline whose Spark connection is the standalone master (``spark_standalone``) and, with
    ``kafka``, whose Kafka connection is the three brokers (``clusters``): nothing else differs.
    500 records per Spark task: a 10,000-record batch is 20 tasks on the worker's 2 cores, so when
    its first file appears most of its tasks have yet to read their slice."""
    conf = {**SPARK_TEST_CONF, "spark.executor.extraJavaOptions": SPARK_TEST_CONF["spark.driver.extraJavaOptions"],
            "spark.executor.memory": "512m", "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    p = make_pipeline(suffix, spark={"conn_id": "spark_cluster", "records_per_task": 500, "conf": conf})
    p.env = {**p.env, "AIRFLOW_CONN_SPARK_CLUSTER": json.dumps(spark.airflow_connection())}
    if kafka is not None:
        kafka.start()  # a node an earlier test killed (and, failing, never restarted) rejoins first
        p.connect("kafka_cluster", kafka.connection_extra())
        p.bootstrap = kafka.bootstrap
        kafka.create_topic(p.topic, 2)
    return p


def when_writing(p: Pipeline, batch_id: int, action, timeout_s: float = 300) -> threading.Thread:
    """Once the batch's job writes its first staged file, run ``action`` (in a thread)."""
    pattern = f"{p.table}/_offsetbatch/attempts/batch_id={batch_id}/attempt=*/data/_temporary"

    def watch() -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not glob.glob(pattern):
            time.sleep(0.05)
        if glob.glob(pattern):
            action()

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def assert_rebuild_matches_ledger(p: Pipeline) -> None:
    """A ledger rebuilt from the pipeline's sink alone (``offsetbatch ledger rebuild``'s plan) has the
    committed batches' ranges and the frontier of the ledger it replaces."""
    from offsetbatch.commit.rebuild import plan_rebuild
    from offsetbatch.sinks import sink_for

    plan = plan_rebuild(p.name, sink_for(p.name, p.cfg.sink))
    assert {i: [(r.topic, r.partition, r.from_offset, r.until_offset) for r in m.ranges]
            for i, m in plan.batches.items()} == \
        {b.batch_id: [(r.topic, r.partition, r.from_offset, r.until_offset) for r in b.ranges]
         for b in p.ledger.list_batches(p.name, 10) if b.status == "committed"}
    assert {(tp.topic, tp.partition): o for tp, o in plan.frontier.items()} == \
        {(r["topic"], r["partition"]): r["next_offset"] for r in p.ledger.frontier_rows(p.name)}


def load_value_config(tmp_path: Path, value: dict, topics=("events",)):
    """A minimal pipeline config (files sink under ``tmp_path``) with this ``value:`` block, loaded:
    the plan-time checks of a value format, without a run."""
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "p", "kafka": {"topics": list(topics)}, "value": value,
                                    "sink": {"path": str(tmp_path / "t")}}))
    return load_config(path)

