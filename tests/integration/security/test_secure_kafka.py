"""A pipeline against a SASL_SSL (SCRAM-SHA-512) broker with ACLs: every record exactly once
through its crashes, every misconfiguration a clear failure of the plan task that changes nothing,
and the password in no process argument, job spec, manifest or log."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from offsetbatch.source.admin import KafkaAdmin
from offsetbatch.source.connection import from_settings
from offsetbatch_dev.sample.producer import produce

pytestmark = pytest.mark.integration
BASE = datetime(2026, 11, 6, tzinfo=timezone.utc)
H = timedelta(hours=1)
USER = "pipeline"
COMMIT = ("import sys\nfrom offsetbatch.dag.tasks import commit_step\nfrom offsetbatch.pipeline import Pipeline\n"
          "print(commit_step(Pipeline.load(sys.argv[1]), [int(sys.argv[2])], sys.argv[3]))\n")


@pytest.fixture
def secure_pipeline(make_pipeline, secure_kafka_broker):
    """A pipeline reading its topic as the ACL-limited pipeline user; records produced as admin."""
    broker = secure_kafka_broker

    def make(suffix: str = "", **overrides):
        p = make_pipeline(suffix, **overrides)
        p.bootstrap = broker.bootstrap
        p.producer_kwargs = broker.client_kwargs("admin")
        settings = broker.connection_extra(USER)
        p.password = settings["sasl.password"]
        p.connect("kafka_secure", settings)
        broker.grant_pipeline([p.topic], p.cfg.group_id, user=USER)
        return p

    return make


class ProcessWatch:
    """Every process's command line, sampled while runs go on (what ``ps`` would show anyone), and
    the environment (``/proc/<pid>/environ``) of the Spark job's processes (its JVM and its Python)
    that this test started: another worker's tests run jobs of their own meanwhile."""

    JOB = ("SparkSubmit", "offsetbatch_job.py", "pyspark.daemon", "pyspark/daemon")

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.environs: dict[int, tuple[str, str]] = {}  # pid -> (command line, environment)
        self._me = os.getpid()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            out = subprocess.run(["ps", "-eww", "-o", "args", "--no-headers"], capture_output=True, text=True).stdout
            self.seen.update(out.splitlines())
            self._sample_environs()
            self._stop.wait(0.2)  # sampling interval

    @staticmethod
    def _parent(pid: int) -> int:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[1])  # the field after the state; comm may hold spaces

    def _ours(self, pid: int) -> bool:
        """Started by this test: a descendant of this process (not a test's on another worker) that
        did not run before the watch began (not a server an earlier test of this worker started, such
        as a Spark Connect server, whose environment is the test process's own)."""
        if pid in self._before:
            return False
        while pid > 1:
            pid = self._parent(pid)
            if pid == self._me:
                return True
        return False

    def _sample_environ(self, proc: Path) -> None:
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if any(mark in cmdline for mark in self.JOB) and int(proc.name) not in self.environs \
                    and self._ours(int(proc.name)):
                environ = (proc / "environ").read_bytes().replace(b"\0", b"\n").decode(errors="replace")
                self.environs[int(proc.name)] = (cmdline, environ)
        except OSError:  # the process ended meanwhile
            pass

    def _sample_environs(self) -> None:
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                self._sample_environ(proc)

    def __enter__(self) -> "ProcessWatch":
        self._before = {int(proc.name) for proc in Path("/proc").iterdir() if proc.name.isdigit()}
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _doctor(p) -> list[dict]:
    res = subprocess.run(["offsetbatch", "--pipelines", str(p.root), "--json", "doctor"], env=p.env,
                         capture_output=True, text=True, timeout=300)
    return json.loads(res.stdout)


def test_hourly_runs_over_sasl_ssl_through_crashes_are_exactly_once_and_leak_no_secret(secure_pipeline,
                                                                                          secure_kafka_broker):
    """Three hours: the first runs plainly, the second's Spark driver is killed mid-write, the
    third's commit is killed inside its ledger transaction; each crashed run is re-run. One
    pipeline for all of it: the claims are per run, and five DAG runs cost minutes."""
    p = secure_pipeline()
    p.produce(1500, start=BASE, hours=3)
    with ProcessWatch() as ps:
        outcomes = [p.run(BASE)]
        for hour, fault, expect in ((1, "job.kill_during_write", "killing the Spark driver mid-write"),
                                    (2, "commit.in_transaction", "injected fault at commit.in_transaction")):
            crashed = p.run(BASE + hour * H, faults=fault)
            crashed.assert_failed_with(expect)
            outcomes += [crashed, p.run(BASE + hour * H, run_after=crashed.run_after)]
    for out in outcomes[::2]:  # the first run and both reruns
        assert out.ok, out.output[-4000:]
    report = p.check()
    assert report.ok, report.summary()
    assert any("SparkSubmit" in line or "spark-submit" in line for line in ps.seen), "the sampler saw the job"
    assert any("--secrets" in line for line in ps.seen), "the job got its secrets by file"
    # the job's processes run without the task's secrets: the connection (AIRFLOW_CONN_*) is not in
    # the environment of the Spark JVM or of the job's Python, where a transform could read it
    sampled = list(ps.environs.values())
    assert any("SparkSubmit" in cmd for cmd, _ in sampled) and any("offsetbatch_job.py" in cmd and "java" not in
                                                                    cmd.split()[0] for cmd, _ in sampled), \
        "the sampler read the environment of the job's JVM and of its Python"
    leaked = [(cmd[:200], [line.split("=", 1)[0] for line in env.splitlines() if p.password in line
                           or line.startswith("AIRFLOW_CONN_")]) for cmd, env in sampled
              if p.password in env or "AIRFLOW_CONN_" in env]
    assert leaked == [], f"connection secrets in the job's environment: {leaked}"

    # group progress published by the pipeline user (READ on its group), read back by the admin
    with KafkaAdmin(from_settings("admin", secure_kafka_broker.connection_extra("admin"))) as admin:
        assert admin.group_offsets(p.cfg.group_id) == p.ledger.frontier_now(p.name)

    # the password is nowhere: process arguments, task logs, job specs, manifests, Airflow's logs
    places = {"ps": "\n".join(ps.seen), "run output": "".join(o.output for o in outcomes)}
    for f in list(Path(p.table).rglob("*.json")) + list(Path(p.env["AIRFLOW_HOME"], "logs").rglob("*.log")):
        places[str(f)] = f.read_text(errors="replace")
    assert [name for name, text in places.items() if p.password in text] == []
    assert any("_offsetbatch/plans" in name for name in places), "job specs were checked"
    # the secrets files this test's jobs were given (named on their command lines; the other pytest
    # worker's pipelines write their own meanwhile) are all gone
    given = {Path(f).parent for cmd, _ in sampled for f in re.findall(r"--secrets (\S+)", cmd)}
    assert given and all(d.parent == Path(tempfile.gettempdir()) for d in given)
    assert [d for d in given if d.exists()] == [], "a secrets file outlived its run"


def test_each_misconfiguration_fails_the_plan_task_at_once_and_changes_nothing(secure_pipeline, secure_kafka_broker):
    # 2 retries 30 s apart, as in production: a refusal must not use them
    p = secure_pipeline(airflow={"retries": 2, "retry_delay_seconds": 30})
    p.produce(300, start=BASE, hours=1)
    good = secure_kafka_broker.connection_extra(USER)
    no_ca = {k: v for k, v in good.items() if k != "ssl.ca.location"}
    plaintext = {"bootstrap.servers": good["bootstrap.servers"]}
    cases = [
        ("wrong_password", {**good, "sasl.password": "not-the-password"}, "authentication failed for user 'pipeline'"),
        ("unknown_user", {**good, "sasl.username": "nobody"}, "authentication failed for user 'nobody'"),
        ("untrusted_cert", no_ca, "its certificate is not trusted: set ssl.ca.location"),
        ("plaintext", plaintext, "the broker's port speaks TLS but the connection's security.protocol is PLAINTEXT"),
    ]
    before, digest = p.snapshot(), p.ledger_digest()
    for conn_id, settings, message in cases:
        p.connect(f"kafka_{conn_id}", settings)
        out = p.run(BASE)
        out.assert_failed_with(message)
        out.assert_failed_with(f"connection 'kafka_{conn_id}'")
        # no retry can fix it: AirflowFailException, and the plan task started once
        assert "AirflowFailException" in out.output and \
            out.output.count("[DAG TEST] starting task_id=plan ") == 1, out.output[-4000:]
        assert p.snapshot() == before and p.ledger_digest() == digest, conn_id

    # doctor: authenticated, and the pipeline user has the ACLs it needs
    p.connect("kafka_secure", good)
    [kafka_check] = [c for c in _doctor(p) if c["name"] == f"{p.name}: kafka"]
    assert kafka_check["ok"] and "may describe and read the topics and its group" in kafka_check["detail"], kafka_check

    # ACLs: the pipeline user may not describe a topic nobody granted it
    other = f"{p.topic}-ungranted"
    produce(secure_kafka_broker.bootstrap, other, 10, partitions=1, start=BASE, progress=False,
            client_kwargs=secure_kafka_broker.client_kwargs("admin"))
    cfg = yaml.safe_load(p.config_path.read_text())
    cfg["kafka"]["topics"] = [p.topic, other]
    p.config_path.write_text(yaml.safe_dump(cfg))
    before, digest = p.snapshot(), p.ledger_digest()  # doctor above may have opened the ledger
    out = p.run(BASE)
    out.assert_failed_with(f"the broker denied describing topic(s) {other}")
    assert "AirflowFailException" in out.output
    assert p.snapshot() == before and p.ledger_digest() == digest
    [kafka_check] = [c for c in _doctor(p) if c["name"] == f"{p.name}: kafka"]
    assert not kafka_check["ok"] and f"denied describing topic(s) {other}" in kafka_check["detail"], kafka_check


@pytest.mark.spark_connect  # its jobs read the SASL_SSL broker from the suite's Connect server
def test_a_kafka_sink_user_without_producer_acls_is_refused_before_anything_changes(secure_pipeline,
                                                                                     secure_kafka_broker):
    """A Kafka sink whose user may read the source but not publish used to be found after the
    ledger transaction (committed, then the producer refused or timed out). Now the broker is
    asked, without producing anything, what this user may do on the output topic, the
    transactional id and the marker group: by the plan task before it opens the ledger (no Spark
    job spent), and again by the commit before its ledger transaction (an ACL revoked in between).
    Every missing ACL is named and nothing is retried. The one ACL no broker reports before the
    first publish (READ on a marker group that has no offsets yet) fails the publish after the
    ledger transaction, with nothing visible and a clear error; once granted, the rerun publishes
    the batch once."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import NewTopic

    broker = secure_kafka_broker
    p = secure_pipeline(transform={"sql": "SELECT event_id, kafka_topic, kafka_partition, kafka_offset FROM records"},
                        sink={"event_time_column": None, "type": "kafka", "topic": "placeholder"})
    out = f"{p.topic}-out"
    admin = broker.admin_client()
    try:
        admin.create_topics([NewTopic(out, 1, 1)])
    finally:
        admin.close()
    cfg = yaml.safe_load(p.config_path.read_text())
    cfg["sink"].update(topic=out, conn_id="kafka_secure")
    p.config_path.write_text(yaml.safe_dump(cfg))
    p.produce(400, start=BASE, hours=2)
    txn_id, group = f"offsetbatch.{p.name}.{out}", f"offsetbatch.{p.name}.published"

    def output_ids() -> list[str]:
        """The output topic as a read_committed consumer (the admin user) sees it."""
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                 isolation_level="read_committed", **broker.client_kwargs("admin"))
        try:
            tp = TopicPartition(out, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            end, ids = consumer.end_offsets([tp])[tp], []
            while consumer.position(tp) < end:
                for batch in consumer.poll(timeout_ms=2000).values():
                    ids.extend(json.loads(r.value)["event_id"] for r in batch)
            return ids
        finally:
            consumer.close()

    def lacks(output: str) -> str:
        [line] = [line for line in output.splitlines() if f"user '{USER}' may not publish: it lacks" in line][:1]
        return line.split("it lacks ", 1)[1].split(". A Kafka sink's user needs", 1)[0]

    def statuses() -> list[tuple[str, bool]]:
        published = p.ledger.last_published(p.name)
        return [(b.status, published is not None and published[0] >= b.batch_id)
                for b in sorted(p.ledger.list_batches(p.name, 10), key=lambda b: b.batch_id)]

    # 1. the plan task: nothing planned, no Spark job, the ledger byte-identical
    before, digest = p.snapshot(), p.ledger_digest()
    first = p.run(BASE)
    assert lacks(first.output) == (f"DESCRIBE, READ and WRITE on topic {out}; DESCRIBE and READ on group {group}; "
                                   f"WRITE on transactional id {txn_id}"), first.output[-3000:]
    assert "Nothing was changed. Get them granted, then trigger the run again" in first.output
    assert "AirflowFailException" in first.output and "starting task_id=spark_job" not in first.output
    assert first.output.count("[DAG TEST] starting task_id=plan ") == 1
    assert p.snapshot() == before and p.ledger_digest() == digest and output_ids() == []
    [target] = [c for c in _doctor(p) if c["name"] == f"{p.name}: output topic"]
    assert not target["ok"] and lacks(target["detail"]).startswith(f"DESCRIBE, READ and WRITE on topic {out}"), target

    broker.grant(USER, "TOPIC", out, "DESCRIBE", "WRITE")
    second = p.run(BASE)
    assert lacks(second.output) == (f"READ on topic {out}; DESCRIBE and READ on group {group}; "
                                    f"WRITE on transactional id {txn_id}")
    assert p.snapshot() == before and p.ledger_digest() == digest

    # 2. READ on a group with no offsets yet cannot be seen before the first publish: the publish
    # is refused after the ledger transaction, nothing is visible, and the rerun publishes it once
    broker.grant(USER, "TOPIC", out, "READ")
    broker.grant(USER, "GROUP", group, "DESCRIBE")
    broker.grant(USER, "TRANSACTIONAL_ID", txn_id, "WRITE")
    unpublished = p.run(BASE)
    unpublished.assert_failed_with(f"batch 1, topic {out}: is committed in the ledger, but the broker refused its "
                                   f"publish (send_offsets_to_transaction (group {group}): GROUP_AUTHORIZATION_FAILED")
    assert "read_committed consumers see none of its records" in unpublished.output
    assert "AirflowFailException" in unpublished.output
    assert statuses() == [("committed", False)] and output_ids() == []
    broker.grant(USER, "GROUP", group, "READ")
    assert p.run(BASE, run_after=unpublished.run_after).ok
    assert statuses() == [("committed", True)]

    # 3. the commit's own check: the second hour's commit fails once (injected), the group's READ
    # is revoked (the group has offsets now, so the broker reports it), the commit is refused while
    # the batch is planned; granted again, the run commits and publishes it once
    crashed = p.run(BASE + H, faults="commit.before_transaction")
    crashed.assert_failed_with("injected fault at commit.before_transaction")
    broker.revoke(USER, "GROUP", group, "READ")
    [staged] = Path(p.table, "_offsetbatch", "attempts", "batch_id=2").glob("attempt=*/_manifest.json")
    commit = subprocess.run([sys.executable, "-c", COMMIT, str(p.config_path), "2",
                             staged.parent.name.removeprefix("attempt=")],
                            env={k: v for k, v in p.env.items() if k != "OFFSETBATCH_FAULTS"},
                            capture_output=True, text=True, timeout=300)
    assert commit.returncode != 0 and "KafkaAuthError" in commit.stderr, commit.stderr[-3000:]
    assert lacks(commit.stderr) == f"READ on group {group}", commit.stderr[-3000:]
    assert "Nothing was committed; the batch stays planned. Get them granted, then clear the commit task" in \
        commit.stderr
    assert statuses() == [("committed", True), ("planned", False)]

    broker.grant(USER, "GROUP", group, "READ")
    assert p.run(BASE + H, run_after=crashed.run_after).ok
    assert statuses() == [("committed", True), ("committed", True)]
    [target] = [c for c in _doctor(p) if c["name"] == f"{p.name}: output topic"]
    assert target["ok"] and f"use transactional id {txn_id}" in target["detail"], target
    ids = output_ids()
    assert sorted(ids) == sorted(i for i in p.produced.values() if i) and len(set(ids)) == len(ids)


@pytest.mark.parametrize("broker_fixture, listener", [("kafka_broker", "plain"), ("secure_kafka_broker", "tls")])
def test_the_connect_diagnosis_tells_a_real_brokers_listener(broker_fixture, listener, request):
    """The probe behind a failed connect's explanation: a real broker answers the Kafka protocol
    (plaintext) or completes TLS (SASL_SSL), and neither is taken for a web endpoint."""
    from offsetbatch.source import diagnosis

    broker = request.getfixturevalue(broker_fixture)
    assert diagnosis._listener(broker.bootstrap) == listener
    if listener == "plain":
        with socket.create_connection(("127.0.0.1", int(broker.bootstrap.rsplit(":", 1)[1])), timeout=5) as sock:
            assert diagnosis._answer(sock) == "kafka"  # the broker echoed the ApiVersions correlation id
