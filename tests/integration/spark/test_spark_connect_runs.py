"""The spark_job task on a long-running Spark Connect server (``spark.runner: connect``, the
default): hourly runs land every record exactly once without a spark-submit, and a spark_job task
killed mid-write (the Connect client; the server lives on) is re-run to exactly once (issue 18).
The server's own failures (issue 53): killed or stopped mid-job, or never answering, the task fails
naming it within the connection's answer_timeout, and the retry reads the same ranges once."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from harness import worker_port

from offsetbatch_dev.stack.spark_connect import SparkConnectServer

pytestmark = [pytest.mark.integration, pytest.mark.spark_connect]
BASE = datetime(2026, 11, 1, tzinfo=timezone.utc)
H = timedelta(hours=1)


def test_runs_on_spark_connect_land_exactly_once_through_a_killed_task(make_pipeline, spark_connect_server):
    p = make_pipeline()  # spark.connect_conn_id: the suite's Connect server (the module's mark)
    assert p.cfg.spark.connect_conn_id
    produced = p.produce(2400, start=BASE, hours=3, partitions=2)

    first = p.run(BASE)
    assert first.ok, first.output[-4000:]
    assert "Spark-Submit cmd" not in first.output  # no spark-submit, no JVM started by the run

    killed = p.run(BASE + H, faults="job.kill_during_write")
    assert not killed.ok
    assert "killing the Spark client (the spark_job task) mid-write" in killed.output
    assert spark_connect_server.pid()  # the server survives its client
    rerun = p.run(BASE + H)
    assert rerun.ok, rerun.output[-4000:]
    third = p.run(BASE + 2 * H)
    assert third.ok, third.output[-4000:]

    batches = sorted(p.ledger.list_batches(p.name), key=lambda b: b.batch_id)
    assert [b.status for b in batches] == ["committed"] * 3
    report = p.check()
    assert report.ok, report.summary()
    assert report.rejected_found == len(produced.malformed) > 0


# The server under fault: its own, so that killing it costs the other tests nothing. Its connection
# answers within 5 s or the task gives up on it (the extra 'answer_timeout'; 30 s by default).
OWN_CONN = "spark_connect_own"
ANSWER_TIMEOUT_S = 5


def _own_connection(host_port: tuple[str, int]) -> dict[str, str]:
    return {f"AIRFLOW_CONN_{OWN_CONN.upper()}": json.dumps(
        {"conn_type": "spark_connect", "host": host_port[0], "port": host_port[1],
         "extra": {"answer_timeout": ANSWER_TIMEOUT_S}})}


@pytest.fixture(scope="module")
def own_connect_server(test_state):
    from offsetbatch.dag.spark_jars import spark_connector_jars

    server = SparkConnectServer(port=worker_port(15302), master="local[2]", home=test_state / "spark-connect-own",
                                jars=spark_connector_jars(), conf={"spark.sql.shuffle.partitions": "2"})
    server.start()
    yield server
    if server.pid():
        os.kill(server.pid(), signal.SIGCONT)  # a stopped JVM ignores SIGTERM until continued
    server.stop()


def _signal_when_writing(p, pid: int, sig: int, sent: list[float]) -> threading.Thread:
    """Send ``sig`` to the server ``pid`` as soon as the job's first data file is being written
    (a task's file under the committer's _temporary/ folder in the batch's staging)."""
    def watch() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            for folder, _, names in os.walk(p.table):
                if "/_temporary/" in folder and any(n.startswith("part-") for n in names):
                    os.kill(pid, sig)
                    sent.append(time.monotonic())
                    return
            time.sleep(0.005)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "stopped"])
def test_a_server_lost_mid_job_fails_the_task_naming_it_and_the_retry_reads_the_same_ranges_once(
        make_pipeline, own_connect_server, sig):
    """The Connect server SIGKILLed (or SIGSTOPped: it accepts connections and never answers) while
    the job writes: the task fails within the connection's answer_timeout with one line naming the
    server, the pipeline, the batch and its ranges, not after the client's 10 minutes of retries or
    a hang. Nothing is committed; the retry, once the server is back (restarted, or continued: its
    orphaned write may even finish, into an attempt folder no commit reads), reads the same ranges
    and lands every record once."""
    p = make_pipeline(f"_{signal.Signals(sig).name.lower()}",
                      spark={"connect_conn_id": OWN_CONN, "conf": {"spark.sql.shuffle.partitions": "2"}})
    p.env = {**p.env, **_own_connection(("127.0.0.1", own_connect_server.port))}
    produced = p.produce(20_000, start=BASE, hours=1, partitions=2)

    sent: list[float] = []
    watcher = _signal_when_writing(p, own_connect_server.pid(), sig, sent)
    failed = p.run(BASE)
    watcher.join(timeout=5)
    assert sent, "the job finished before its first data file could be caught being written"
    took = time.monotonic() - sent[0]
    failed.assert_failed_with(f"the Spark Connect server 127.0.0.1:{own_connect_server.port} (Airflow connection "
                              f"{OWN_CONN})")
    assert f"pipeline {p.name} batch(es) 1 attempt" in failed.output and "offsetbatch-stack spark-connect" in failed.output
    assert took < ANSWER_TIMEOUT_S + 20, f"the task took {took:.0f}s after the server was lost"
    [planned] = p.ledger.list_batches(p.name)
    assert planned.status == "planned"

    if sig == signal.SIGKILL:
        own_connect_server.stop()  # the stale pid file of the killed JVM
        own_connect_server.start()
    else:
        os.kill(own_connect_server.pid(), signal.SIGCONT)
    retry = p.run(BASE, run_after=failed.run_after)  # the same Airflow run, its failed task cleared
    assert retry.ok, retry.output[-4000:]

    [batch] = p.ledger.list_batches(p.name)
    assert batch.status == "committed" and batch.describe_ranges() == planned.describe_ranges()
    report = p.check()  # record by record: every produced id once, every malformed offset rejected once
    assert report.ok, report.summary()
    assert report.rejected_found == len(produced.malformed) > 0


@pytest.mark.parametrize("answer", ["silent", "refused"])
def test_a_server_that_does_not_answer_fails_the_task_naming_it_within_its_answer_timeout(make_pipeline, answer):
    """A connection to a port that accepts and never answers (a listening socket that never
    replies), or that nothing listens on: the task fails naming the server within answer_timeout,
    before the job starts; the batch stays planned for a retry."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # the kernel completes each handshake; nothing ever reads or writes
        port = silent.getsockname()[1]
        if answer == "refused":
            silent.close()
        p = make_pipeline(f"_{answer}", spark={"connect_conn_id": OWN_CONN})
        p.env = {**p.env, **_own_connection(("127.0.0.1", port))}
        p.produce(200, start=BASE, hours=1, partitions=2)
        t0 = time.monotonic()
        failed = p.run(BASE)
        took = time.monotonic() - t0
    failed.assert_failed_with(f"the Spark Connect server 127.0.0.1:{port} (Airflow connection {OWN_CONN}) "
                              + ("accepted the connection but did not answer within 5s" if answer == "silent"
                                 else "refused the connection"))
    assert f"pipeline {p.name} batch(es) 1 attempt" in failed.output
    assert took < ANSWER_TIMEOUT_S + 30, f"the whole run took {took:.0f}s"
    assert [b.status for b in p.ledger.list_batches(p.name)] == ["planned"]


SETTINGS_CHILD = """
import json, sys
from pyspark.sql import SparkSession
from offsetbatch.spark_session import get_settings, set_settings, unset_settings
from offsetbatch_dev.bench.connect_calls import counting
spark = SparkSession.builder.remote(sys.argv[1]).create()
keys = {"spark.sql.shuffle.partitions": "9", "spark.sql.session.timeZone": "Etc/GMT+3", "offsetbatch.test.never_set": "d"}
out = {}
with counting() as calls:
    set_settings(spark, {"spark.sql.shuffle.partitions": "7", "spark.sql.session.timeZone": "Asia/Tokyo"})
    out["set"] = get_settings(spark, keys)
    unset_settings(spark, ["spark.sql.shuffle.partitions", "spark.sql.session.timeZone"])
    out["unset"] = get_settings(spark, keys)
out["requests"] = [c.kind for c in calls]
out["pyspark"] = {k: spark.conf.get(k, d) for k, d in keys.items()}  # pyspark's own answer, a request per key
spark.stop()
print(json.dumps(out))
"""


def test_session_settings_go_in_one_request_each_and_read_as_pyspark_reads_them(spark_connect_server):
    """``spark_session.get_settings``/``set_settings``/``unset_settings`` on a real Connect session:
    what they set and unset reads back the same through pyspark's own ``spark.conf``, and each is one
    Config request (the job's settings for a batch: the codegen switch, the transform's guards)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", SETTINGS_CHILD, spark_connect_server.url], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["set"] == {"spark.sql.shuffle.partitions": "7", "spark.sql.session.timeZone": "Asia/Tokyo",
                          "offsetbatch.test.never_set": "d"}
    assert out["unset"] == out["pyspark"]
    assert out["unset"]["spark.sql.session.timeZone"] == "Etc/GMT+3"  # unset: no session value, the default asked
    assert out["requests"] == ["Config"] * 4
