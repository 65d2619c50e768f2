"""The postgres sink on the project's own PostgreSQL, with the real broker, Spark and Airflow: a
batch's rows and its offsets commit in one transaction (docs/architecture.md, *The PostgreSQL sink*).

DAG runs are few (5 in all): the crash and reader cases drive the commit task's own code
(``tasks.commit_step``) in a subprocess against a batch a real run planned and staged, which is
exactly the process a kill -9 hits in production; the schema cases call the sink's transaction
hook on staged Parquet directly.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
import yaml
from harness import sample_sink

from offsetbatch.config import PIPELINES_DIR, load_config
from offsetbatch.errors import SinkError
from offsetbatch.jobspec import Manifest
from offsetbatch.ledger import Ledger
from offsetbatch.sinks.postgres import PostgresSettings, PostgresSink
from offsetbatch_dev import verify

pytestmark = [pytest.mark.integration, pytest.mark.spark_connect]  # Spark jobs on the suite's Connect server
BASE = datetime(2026, 11, 2, tzinfo=timezone.utc)
H = timedelta(hours=1)
TABLE = "public.sample_events"
COMMIT = ("import sys\nfrom offsetbatch.dag.tasks import commit_step\nfrom offsetbatch.pipeline import Pipeline\n"
          "print(commit_step(Pipeline.load(sys.argv[1]), [int(sys.argv[2])], sys.argv[3]))\n")


def _sample_pipeline(make_pipeline, postgres, **sink):
    """The sample pipeline's PostgreSQL variant (its value schema, transform and sink), on a test
    topic, with its ledger (and so its table) in a fresh database of the test PostgreSQL."""
    sample = yaml.safe_load((PIPELINES_DIR / "postgres" / "sample_events_postgres.yaml").read_text())
    url = postgres.create_database(f"pg_sink_{uuid.uuid4().hex[:8]}")
    p = make_pipeline(ledger_url=url, value=sample["value"], transform=sample["transform"],
                      sink={**sample_sink("postgres"), "event_time_column": None,
                            **sink})
    assert p.cfg.sink.type == "postgres" and p.cfg.sink.url == url
    return p, url


def _rows_match_ledger(p, url) -> dict[int, int]:
    """count(*) per batch in the table equals the ledger's rows_out of every committed batch."""
    counts = verify.rows_per_batch(url, TABLE)
    committed = {b.batch_id: b.stats["rows_out"] for b in p.ledger.list_batches(p.name, 100)
                 if b.status == "committed" and b.target_batch_id is None}
    assert {i: counts.get(i, 0) for i in committed} == committed and set(counts) <= set(committed)
    return counts


def _staged_attempt(p, batch_id: int) -> str:
    found = list(Path(p.table, "_offsetbatch", "attempts", f"batch_id={batch_id}").glob("attempt=*/_manifest.json"))
    assert len(found) == 1, found
    return found[0].parent.name.removeprefix("attempt=")


def _commit(p, batch_id: int, attempt: str, faults: str | None = None, **env) -> subprocess.Popen:
    """The commit task's logic (``tasks.commit_step``) in its own process, as the task runs it."""
    run_env = {**p.env, **env}
    run_env.pop("OFFSETBATCH_FAULTS", None)
    if faults:
        run_env["OFFSETBATCH_FAULTS"] = faults
    return subprocess.Popen([sys.executable, "-c", COMMIT, str(p.config_path), str(batch_id), attempt], env=run_env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _state(p, url) -> dict:
    return {"rows": sorted(verify.table_rows(url, TABLE, ["batch_id", "event_id"])),
            "rejected": sorted(verify.table_rows(url, f"{TABLE}_rejected", ["batch_id", "kafka_offset"])),
            "frontier": p.ledger.frontier_rows(p.name),
            "batches": [(b.batch_id, b.status) for b in p.ledger.list_batches(p.name, 100)]}


def _consistent_snapshot(url: str, pipeline: str) -> tuple[int, dict[int, int]]:
    """One REPEATABLE READ snapshot, as a reader of the table sees it: every committed batch's rows
    are all there, no other batch has a row, and the frontier never names a batch whose rows are
    missing. Returns (sum of the frontier, rows per batch)."""
    engine = sa.create_engine(url, isolation_level="REPEATABLE READ")
    try:
        with engine.connect() as conn:
            rows = dict(conn.execute(sa.text(f"SELECT batch_id, count(*) FROM {TABLE} GROUP BY 1")).all())
            batches = {r.batch_id: r for r in conn.execute(sa.text(
                "SELECT batch_id, status, rows_out FROM ob_batches WHERE pipeline = :p"), {"p": pipeline})}
            front = conn.execute(sa.text("SELECT coalesce(sum(next_offset), 0), array_agg(DISTINCT batch_id) "
                                         "FROM ob_frontier WHERE pipeline = :p"), {"p": pipeline}).one()
    finally:
        engine.dispose()
    for batch_id, b in batches.items():
        expected = b.rows_out if b.status == "committed" else 0
        assert rows.get(batch_id, 0) == expected, f"batch {batch_id} ({b.status}) shows {rows.get(batch_id, 0)} rows"
    assert set(rows) <= {i for i, b in batches.items() if b.status == "committed"}
    for batch_id in front[1] or []:
        assert batch_id is None or (batches[batch_id].status == "committed" and rows.get(batch_id)), \
            f"the frontier was moved by batch {batch_id}, whose rows are not visible"
    return front[0], rows


def test_sample_variant_hourly_kill9_inside_the_commit_reader_and_replay(make_pipeline, postgres, tmp_path):
    p, url = _sample_pipeline(make_pipeline, postgres)
    p.produce(1200, start=BASE, hours=2)

    # hour 1: a full DAG run lands batch 1; count(*) == rows_out
    first = p.run(BASE)
    assert first.ok, first.output[-4000:]
    assert set(_rows_match_ledger(p, url)) == {1}

    # hour 2: plan and Spark job run, the commit task dies before touching the ledger
    crashed = p.run(BASE + H, faults="commit.before_transaction")
    crashed.assert_failed_with("injected fault at commit.before_transaction")
    attempt = _staged_attempt(p, 2)
    before = _state(p, url)

    # kill -9 inside the ledger transaction, before and after the COPY: nothing changes
    for point in ("commit.before_copy", "commit.after_copy"):
        proc = _commit(p, 2, attempt, faults=f"{point}:kill")
        out = proc.communicate(timeout=300)[0]
        assert proc.returncode == -signal.SIGKILL, out[-3000:]
        assert f"SIGKILL at {point}" in out
        assert _state(p, url) == before, point

    # the rerun of the commit, paused after its COPY: readers in REPEATABLE READ never see a half
    # batch nor a frontier ahead of its rows, before, during and after it
    frontier_before, _ = _consistent_snapshot(url, p.name)
    samples: list[tuple[int, dict]] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                samples.append(_consistent_snapshot(url, p.name))
            except BaseException as exc:  # noqa: BLE001 - reported by the test thread
                errors.append(exc)
                return

    reader = threading.Thread(target=read)
    reader.start()
    proc = _commit(p, 2, attempt, faults="commit.after_copy:pause", OFFSETBATCH_FAULTS_DIR=str(tmp_path))
    deadline = time.monotonic() + 300
    while not (tmp_path / "commit.after_copy.paused").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
        time.sleep(0.1)  # waiting for the commit to reach its pause point
    during = len(samples)
    held = _consistent_snapshot(url, p.name)
    assert held[0] == frontier_before and 2 not in held[1]  # the COPY is done but invisible
    (tmp_path / "commit.after_copy.resume").write_text("go")
    out = proc.communicate(timeout=300)[0]
    time.sleep(0.5)  # let the reader take snapshots after the COMMIT too
    done.set()
    reader.join()
    assert proc.returncode == 0, out[-3000:]
    assert not errors, errors[0]
    assert len(samples) > during > 0
    after = _consistent_snapshot(url, p.name)
    assert after[0] == frontier_before + sum(r.size for r in p.ledger.get_batch(p.name, 2).ranges)
    assert {f for f, _ in samples} == {frontier_before, after[0]}  # nothing in between

    # every record exactly once, malformed ones in <table>_rejected, ledger rows_out == count(*)
    report = verify.check_table(url, TABLE, p.expected_ids(), p.malformed(), p.ledger, p.name)
    assert report.ok, report.summary()
    counts = _rows_match_ledger(p, url)
    assert not Path(p.table, "_offsetbatch", "attempts", "batch_id=2").exists()

    # replay of batch 1 after a transform change (a new column too): exactly batch 1's rows replaced
    cfg = yaml.safe_load(p.config_path.read_text())
    cfg["transform"]["sql"] = cfg["transform"]["sql"].replace("SELECT event_id, kind,",
                                                              "SELECT event_id, upper(kind) AS kind, length(page) AS page_len,")
    p.config_path.write_text(yaml.safe_dump(cfg))
    p.cfg = load_config(p.config_path)
    batch2_before = sorted(verify.table_rows(url, TABLE, ["event_id", "kind", "kafka_offset"], "WHERE batch_id = 2"))
    replay = p.run(None, conf={"mode": "replay", "batch_ids": "1", "reason": "transform changed"})
    assert replay.ok, replay.output[-4000:]
    assert verify.rows_per_batch(url, TABLE) == counts
    one = verify.table_rows(url, TABLE, ["kind", "page_len"], "WHERE batch_id = 1")
    assert one and all(k in ("CLICK", "PURCHASE") and n is not None for k, n in one)
    assert verify.table_rows(url, TABLE, ["page_len"], "WHERE batch_id = 2 AND page_len IS NOT NULL") == []
    assert sorted(verify.table_rows(url, TABLE, ["event_id", "kind", "kafka_offset"], "WHERE batch_id = 2")) \
        == batch2_before
    report = verify.check_table(url, TABLE, p.expected_ids(), p.malformed(), p.ledger, p.name)
    assert report.ok, report.summary()


def _records(bootstrap: str, topic: str) -> dict[tuple[int, int], bytes]:
    """Every record's value by (partition, offset), read back from the broker."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, part) for part in consumer.partitions_for_topic(topic)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out: dict[tuple[int, int], bytes] = {}
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for tp, msgs in consumer.poll(timeout_ms=2000).items():
                out.update({(tp.partition, m.offset): m.value for m in msgs})
        return out
    finally:
        consumer.close()


def test_upsert_keeps_each_keys_newest_change_and_a_replay_does_not_move_it_back(make_pipeline, postgres):
    """Through Airflow and Spark: the sample events upserted by user_id, whose changes spread over
    both partitions, ordered by ``version_column: event_time`` (the producer's order); then a
    replay of batch 1 after batch 2 leaves every key as it was (issue 44: it used to re-apply
    batch 1's values over batch 2's). Model: each user's last produced valid event."""
    import json

    p, url = _sample_pipeline(make_pipeline, postgres, mode="upsert", key=["user_id"], version_column="event_time")
    p.produce(800, start=BASE, hours=2, malformed_fraction=0.0)
    for hour in (BASE, BASE + H):
        run = p.run(hour)
        assert run.ok, run.output[-4000:]
    events = sorted((json.loads(v) for v in _records(p.bootstrap, p.topic).values()), key=lambda e: e["event_time"])
    expected = {e["user_id"]: e["event_id"] for e in events}  # the last produced event of each user wins
    rows = verify.table_rows(url, TABLE, ["user_id", "event_id"])
    assert len(rows) == len({u for u, _ in rows}), "one row per key"
    assert dict(rows) == expected
    batches = p.ledger.list_batches(p.name, 10)
    assert len(expected) < sum(b.stats["rows_out"] for b in batches) and len(batches) == 2  # keys repeated
    changed_by_2 = {u for u, e in rows if e in {ev["event_id"] for ev in events[400:]}}
    assert changed_by_2, "batch 2 holds the newest change of some users"

    replay = p.run(None, conf={"mode": "replay", "batch_ids": "1", "reason": "upsert replay check"})
    assert replay.ok, replay.output[-4000:]
    assert dict(verify.table_rows(url, TABLE, ["user_id", "event_id"])) == expected
    assert len(verify.table_rows(url, f"{TABLE}_changes", ["event_id"])) == 800  # every change, once


def _stage(sink: PostgresSink, batch_id: int, table: pa.Table) -> str:
    """Parquet and a manifest where the Spark job would have left them for attempt 'a'."""
    data = Path(sink.staging.staging_data(batch_id, "a"))
    data.mkdir(parents=True)
    pq.write_table(table, data / "part-0.parquet")
    Manifest(pipeline=sink.pipeline_name, output_id=batch_id, ranges=[], rows_in=table.num_rows, rows_out=table.num_rows,
             rows_rejected=0, bytes_in=0, data_files=[str(data / "part-0.parquet")], rejected_files=[], job_seconds=0,
             spark_version="none", attempt="a").save(sink.staging.staging_manifest(batch_id, "a"))
    return "a"


def _rows(n: int, start: int, user_id: pa.Array | None = None, **extra) -> pa.Table:
    cols = {"event_id": [f"e{i}" for i in range(start, start + n)],
            "user_id": user_id if user_id is not None else pa.array(range(n), pa.int32()),
            "kafka_topic": ["t"] * n, "kafka_partition": pa.array([0] * n, pa.int32()),
            "kafka_offset": pa.array(range(start, start + n), pa.int64())}
    return pa.table({**cols, **extra})


@pytest.mark.parametrize("table", ["public.events", "Sales.Mixed_Case"])
def test_a_column_type_change_fails_before_anything_is_written(postgres, tmp_path, table):
    url = postgres.create_database(f"pg_schema_{uuid.uuid4().hex[:8]}")
    with Ledger(url, create=True) as ledger:
        sink = PostgresSink("schema_check", PostgresSettings(path=str(tmp_path / "staging"), table=table, url=url))
        with ledger.lock(sink.pipeline_name) as conn:
            sink.publish_in_transaction(conn, 1, 1, _stage(sink, 1, _rows(5, 0)), ledger.identity)
        schema, name = table.split(".")
        # the exact (quoted) name was created, and owned by this ledger
        assert sink.owner()["ledger_id"] == ledger.identity and sink.published_ids() == [1]
        assert verify.rows_per_batch(url, f"{schema}.{name}") == {1: 5}

        # batch 2: user_id became a string, and a new column appeared: refused, nothing written
        bad = _rows(3, 5, user_id=pa.array(["x", "y", "z"]), page=pa.array(["/a", "/b", "/c"]))
        with pytest.raises(SinkError) as err, ledger.lock(sink.pipeline_name) as conn:
            sink.publish_in_transaction(conn, 2, 2, _stage(sink, 2, bad), ledger.identity)
        message = str(err.value)
        assert f"pipeline schema_check batch 2, table {table}: column 'user_id' is integer in the table but the " \
               f"batch's rows have text" in message and "Nothing was written" in message
        assert verify.rows_per_batch(url, f"{schema}.{name}") == {1: 5}
        engine = sa.create_engine(url)
        with engine.connect() as c:
            cols = c.execute(sa.text("SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(:t) AND attnum > 0"),
                             {"t": f'"{schema}"."{name}"'}).scalars().all()
        engine.dispose()
        assert "page" not in cols

        # an added column alone is fine: ALTER TABLE ADD COLUMN, in the commit's transaction
        ok = _rows(3, 8, page=pa.array(["/a", None, ""]))
        with ledger.lock(sink.pipeline_name) as conn:
            sink.publish_in_transaction(conn, 3, 3, _stage(sink, 3, ok), ledger.identity)
        assert verify.rows_per_batch(url, f"{schema}.{name}") == {1: 5, 3: 3}
        assert sorted(verify.table_rows(url, f"{schema}.{name}", ["page"], "WHERE batch_id = 3"),
                      key=str) == sorted([("/a",), (None,), ("",)], key=str)


def test_text_that_is_not_utf8_is_refused_naming_the_record_and_the_column(postgres, tmp_path):
    """What COPY does with a string that is not UTF-8 (a transform's CAST of raw bytes: the Avro
    and JSON formats reject such records before the sink, issue 41 case 1): PostgreSQL refuses the
    whole load. That used to be a retried SinkError naming neither the record nor the fix, failing
    again on every retry and every later run. Now: no retry, the record and column named, nothing
    written, the batch still loadable once the text is valid."""
    from offsetbatch.dag.retry_policy import is_permanent

    url = postgres.create_database(f"pg_utf8_{uuid.uuid4().hex[:8]}")
    with Ledger(url, create=True) as ledger:
        sink = PostgresSink("utf8_check", PostgresSettings(path=str(tmp_path / "staging"), table="public.ev", url=url))
        with ledger.lock(sink.pipeline_name) as conn:
            sink.publish_in_transaction(conn, 1, 1, _stage(sink, 1, _rows(3, 0)), ledger.identity)
        # row 2 of batch 2: bytes c3 28 ff viewed as a string (pyarrow does not check a view; Spark's
        # CAST(binary AS STRING) does not check either)
        # (row 1's line break puts row 2 on the COPY's line 3: the message names the row, not the line)
        bad = pa.array([b"ok,\nover two lines", b"bad \xc3\x28 \xff", b"ok too"], pa.binary()).view(pa.string())
        rows = _rows(3, 3, page=bad)
        with pytest.raises(SinkError) as err, ledger.lock(sink.pipeline_name) as conn:
            sink.publish_in_transaction(conn, 2, 2, _stage(sink, 2, rows), ledger.identity)
        message = str(err.value)
        assert ("pipeline utf8_check batch 2, table public.ev: batch 2's row 2 (t/0 offset 4) holds text that is "
                "not valid UTF-8 in column page, which PostgreSQL refuses (invalid byte sequence for "
                'encoding "UTF8": 0xc3 0x28)') in message, message
        assert "Nothing was written or committed" in message and "make_valid_utf8(col)" in message
        assert is_permanent(err.value)
        assert verify.rows_per_batch(url, "public.ev") == {1: 3}


def test_the_unique_constraint_refuses_a_record_twice(postgres, tmp_path):
    """Even a bug that loaded one Kafka record under two batch ids could not: the constraint says no."""
    url = postgres.create_database(f"pg_unique_{uuid.uuid4().hex[:8]}")
    with Ledger(url, create=True) as ledger:
        sink = PostgresSink("unique_check", PostgresSettings(path=str(tmp_path / "staging"), table="public.ev", url=url))
        with ledger.lock(sink.pipeline_name) as conn:
            sink.publish_in_transaction(conn, 1, 1, _stage(sink, 1, _rows(4, 0)), ledger.identity)
        with pytest.raises(SinkError, match="duplicate key value violates unique constraint"), \
                ledger.lock(sink.pipeline_name) as conn:
            sink.publish_in_transaction(conn, 2, 2, _stage(sink, 2, _rows(2, 3)), ledger.identity)
        assert verify.rows_per_batch(url, "public.ev") == {1: 4}
