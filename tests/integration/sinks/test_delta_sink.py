"""The delta sink with the real broker, Spark and Airflow, and delta-rs writing the tables: each
batch one Delta commit carrying its application transaction and offset ranges (docs/architecture.md,
*The Delta sink*). Tables are read back with Polars' Delta reader and delta-rs's log, not with the
sink's code. DuckDB's delta extension is downloaded from DuckDB's own host at first use, which this
project may not reach, and Spark 4.3 has no Delta runtime: neither reads here.

DAG runs are few (3): the crash cases drive the commit task's own code (``tasks.commit_step``) in a
subprocess against a batch a real run planned and staged, which is the process a kill -9 hits; the
other cases drive the commit half on staged Parquet (``_stage_files``), Spark-free.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from harness import assert_rebuild_matches_ledger, sample_sink
from test_iceberg_sink import COMMIT, _stage_files, _staged_attempt

from offsetbatch.config import PIPELINES_DIR, load_config
from offsetbatch.sinks import sink_for
from offsetbatch_dev import verify

pytestmark = [pytest.mark.integration, pytest.mark.spark_connect]
BASE = datetime(2026, 11, 3, tzinfo=timezone.utc)
H = timedelta(hours=1)


def _history(location: str) -> list[dict]:
    """Every commit of the table (oldest first): version, operation, its offsetbatch keys, read from
    the Delta log by delta-rs."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(location):
        return []
    return [{"version": h["version"], "op": h["operation"],
             **{k.removeprefix("offsetbatch."): v for k, v in h.items() if k.startswith("offsetbatch.")}}
            for h in reversed(DeltaTable(location).history())]


def _batches(location: str) -> list[str]:
    return [h["batch-id"] for h in _history(location) if "batch-id" in h]


def _commit(p, batch_id: int, attempt: str, faults: str | None = None, wait: bool = True):
    env = {k: v for k, v in p.env.items() if k != "OFFSETBATCH_FAULTS"}
    if faults:
        env["OFFSETBATCH_FAULTS"] = faults
        env["OFFSETBATCH_FAULTS_DIR"] = str(p.root / "faults")
    args = [sys.executable, "-c", COMMIT, str(p.config_path), str(batch_id), attempt]
    if not wait:
        return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.1)


def test_kill9_at_each_commit_boundary_a_racing_writer_and_a_replay(make_pipeline):
    import polars as pl
    from deltalake import DeltaTable

    sample = yaml.safe_load((PIPELINES_DIR / "delta" / "sample_events_delta.yaml").read_text())
    p = make_pipeline(value=sample["value"], transform=sample["transform"],
                      sink={**sample_sink("delta"), "event_time_column": None})
    cfg = yaml.safe_load(p.config_path.read_text())
    cfg["sink"]["table"] = table = str(p.root / "delta" / "events")
    p.config_path.write_text(yaml.safe_dump(cfg))
    p.cfg = load_config(p.config_path)
    rejected = f"{table}_rejected"
    p.produce(1200, start=BASE, hours=2)

    first = p.run(BASE)
    assert first.ok, first.output[-4000:]
    assert _batches(table) == ["1"] and _batches(rejected) == ["1"]
    assert DeltaTable(table).transaction_version(f"offsetbatch/{p.name}") == 1
    assert DeltaTable(table).metadata().partition_columns == ["event_date"]

    crashed = p.run(BASE + H, faults="commit.before_transaction")
    crashed.assert_failed_with("injected fault at commit.before_transaction")
    attempt = _staged_attempt(p, 2)

    def state() -> dict:
        b = p.ledger.get_batch(p.name, 2)
        return {"data": _batches(table), "rejected": _batches(rejected), "batch": b.status,
                "published": b.stats["published_at"]}

    # kill -9 after the ledger transaction: committed in the ledger, the tables untouched
    out = _commit(p, 2, attempt, "commit.after_transaction:kill")
    assert out.returncode == -signal.SIGKILL, out.stdout[-3000:] + out.stderr[-3000:]
    assert state() == {"data": ["1"], "rejected": ["1"], "batch": "committed", "published": None}

    # kill -9 after the rows' Delta commit, before the rejected records' and the ledger's mark
    out = _commit(p, 2, attempt, "commit.after_delta_commit:kill")
    assert out.returncode == -signal.SIGKILL, out.stdout[-3000:] + out.stderr[-3000:]
    assert state() == {"data": ["1", "2"], "rejected": ["1"], "batch": "committed", "published": None}

    # a writer from elsewhere commits while the commit task is between its check and its commit: the
    # commit task (paused there, holding the ledger lock) reads the rejected table, another process
    # changes that table's properties (a maintenance pass of another tool); the commit task's commit
    # meets the new version, fails, checks again and commits the batch once
    (p.root / "faults").mkdir()
    a = _commit(p, 2, attempt, "commit.delta_checked:pause", wait=False)
    _wait_for(p.root / "faults" / "commit.delta_checked.paused", a)
    DeltaTable(rejected).alter.set_table_properties({"delta.logRetentionDuration": "interval 30 days"})
    (p.root / "faults" / "commit.delta_checked.resume").touch()
    out_a, _ = a.communicate(timeout=300)
    assert a.returncode == 0, out_a[-3000:]
    assert "another writer committed first" in out_a and "already holds this batch" in out_a  # (the rows' table)
    done = state()
    assert done["data"] == ["1", "2"] and done["rejected"] == ["1", "2"] and done["published"] is not None

    # every record once, read by Polars; each commit's ranges are the ledger's
    report = verify.check_delta(table, p.expected_ids(), p.malformed(), p.ledger, p.name)
    assert report.ok, report.summary()
    for h in _history(table):
        if "batch-id" in h:
            batch = p.ledger.get_batch(p.name, int(h["batch-id"]))
            assert sorted((r["topic"], r["partition"], r["from_offset"], r["until_offset"])
                          for r in json.loads(h["ranges"])) \
                == sorted((r.topic, r.partition, r.from_offset, r.until_offset) for r in batch.ranges)
    assert not Path(sink_for(p.name, p.cfg.sink).staging.attempts(2)).exists()

    # a lost ledger is rebuilt from the commits' markers alone: the same ranges and frontier
    assert_rebuild_matches_ledger(p)

    # replay of batch 1 after a transform change with a new column: one commit replaces its rows
    pinned = DeltaTable(table).version()
    old = sorted(verify.delta_rows(table, ["event_id", "kind", "batch_id"], version=pinned))
    cfg = yaml.safe_load(p.config_path.read_text())
    cfg["transform"]["sql"] = cfg["transform"]["sql"].replace("SELECT event_id, kind,",
                                                              "SELECT event_id, upper(kind) AS kind, length(page) AS page_len,")
    p.config_path.write_text(yaml.safe_dump(cfg))
    p.cfg = load_config(p.config_path)
    replay = p.run(None, conf={"mode": "replay", "batch_ids": "1", "reason": "transform changed"})
    assert replay.ok, replay.output[-4000:]
    last = _history(table)[-1]
    assert (last["version"], last["batch-id"], last["output-id"], last["kind"]) == (pinned + 1, "3", "1", "replay")
    assert sorted(verify.delta_rows(table, ["event_id", "kind", "batch_id"], version=pinned)) == old  # time travel
    rows = verify.delta_rows(table, ["event_id", "kind", "batch_id", "page_len"])
    assert sorted(e for e, _, b, _ in rows if b == 1) == sorted(e for e, _, b in old if b == 1)
    assert all(k in ("CLICK", "PURCHASE") and n is not None for _, k, b, n in rows if b == 1)
    assert all(n is None for *_, b, n in rows if b == 2)
    report = verify.check_delta(table, p.expected_ids(), p.malformed(), p.ledger, p.name)
    assert report.ok, report.summary()
    assert sink_for(p.name, p.cfg.sink).published_ids() == [1, 2]
    assert pl.read_delta(table).height == len(p.expected_ids())


def _sink(tmp_path, **settings):
    from offsetbatch.sinks.delta import DeltaSettings, DeltaSink

    return DeltaSink("lake", DeltaSettings(staging=str(tmp_path / "staging"), table=str(tmp_path / "t"), **settings))


def test_a_rewind_a_refused_type_change_and_maintenance_that_keeps_the_markers(tmp_path):
    """No DAG run: the commit half on staged Parquet."""
    from datetime import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from offsetbatch.errors import SinkSchemaError
    from offsetbatch.sinks.maintenance import Horizon, MaintenanceSettings

    sink = _sink(tmp_path)
    table = str(tmp_path / "t")
    for batch_id in range(1, 7):
        sink.publish(batch_id, batch_id, _stage_files(sink, batch_id, batch_id, [0, 1], 20 * (batch_id - 1)))
    assert sink.published_ids() == [1, 2, 3, 4, 5, 6] and len(DeltaTable(table).file_uris()) == 6  # a file per batch
    # delta-rs cleans no log entry on its own (its post-commit hook would, past the log retention, before
    # maintenance archived their markers)
    assert DeltaTable(table).metadata().configuration["delta.enableExpiredLogCleanup"] == "false"

    # a rewind: batch 7 re-read batch 6's offsets (and more); one commit drops 6 and adds 7
    before = DeltaTable(table).version()
    sink.publish(7, 7, _stage_files(sink, 7, 7, [0, 1, 2], 100), superseded=[6])
    assert DeltaTable(table).version() == before + 1 and _history(table)[-1]["retired"] == "6"
    sink.retire(6)  # nothing left: delta-rs deletes nothing and commits nothing
    assert DeltaTable(table).version() == before + 1
    ids = [e for (e,) in verify.delta_rows(table, ["event_id"])]
    assert len(ids) == len(set(ids)) == 5 * 20 + 30 and sink.published_ids() == [1, 2, 3, 4, 5, 7]

    # a type change no Delta column can take is refused before the ledger transaction
    attempt = _stage_files(sink, 8, 8, [0], 200)
    staged = sink.staging.staging_data(8, attempt)
    path = next(Path(staged).rglob("*.parquet"))
    t = pq.read_table(path)
    pq.write_table(t.set_column(t.schema.get_field_index("kafka_offset"), "kafka_offset",
                                pa.array([str(o) for o in t.column("kafka_offset").to_pylist()])), path)
    with pytest.raises(SinkSchemaError, match=r"pipeline lake batch 8, Delta table .*kafka_offset: long in the table, "
                                              r"string in the batch"):
        sink.check_publishable(8, 8, attempt)

    # maintenance: compaction, then the log cleaned with every marker archived; what the markers say
    # (published ids, manifests, the applied check) is the same before and after
    manifests = {i: (m.ranges, m.rows_out) for i, m in sink.published_manifests().items()}
    now = dt.now(timezone.utc)
    policy = MaintenanceSettings(retain=3600, in_flight_grace=3600, min_input_files=4)
    actions = sink.maintenance(policy, Horizon(now, now - H, now - H, now - H))
    assert [a.step for a in actions] == ["delta.compact", "delta.clean-log"]
    files = len(DeltaTable(table).file_uris())
    results = [a.apply() for a in actions]
    assert results[0] == {"files_in": files, "files_out": 1} and len(DeltaTable(table).file_uris()) == 1
    (tmp_path / "t" / "_delta_log" / "00000000000000000000.json").unlink()  # as a cleanup past retention would
    (tmp_path / "t" / "_delta_log" / "00000000000000000001.json").unlink()
    assert {i: (m.ranges, m.rows_out) for i, m in sink.published_manifests().items()} == manifests
    assert sink.published_ids() == [1, 2, 3, 4, 5, 7]
    again = _stage_files(sink, 2, 2, [0, 1], 20)
    sink.publish(2, 2, again)  # a roll-forward of batch 2, known only from the archive: not added twice
    assert sorted(verify.delta_rows(table, ["event_id"])) == sorted((e,) for e in ids)
    assert list((tmp_path / "t" / "_offsetbatch" / "markers").iterdir())


def _stage_changes(sink, batch_id: int, output_id: int, changes: list[tuple[int, int, bool]]) -> str:
    """Staged rows of an upsert's changes (id, lsn, deleted) for attempt 'a<batch_id>'."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from offsetbatch.jobspec import Manifest, RangeReport

    attempt = f"a{batch_id}"
    folder = Path(sink.staging.staging_data(batch_id, attempt))
    folder.mkdir(parents=True, exist_ok=True)
    n = len(changes)
    pq.write_table(pa.table({
        "id": pa.array([c[0] for c in changes], pa.int64()), "lsn": pa.array([c[1] for c in changes], pa.int64()),
        "deleted": [c[2] for c in changes], "kafka_topic": ["cdc"] * n, "kafka_partition": pa.array([0] * n, pa.int32()),
        "kafka_offset": pa.array(range(100 * batch_id, 100 * batch_id + n), pa.int64()),
        "batch_id": pa.array([output_id] * n, pa.int64())}), folder / "part-0.parquet")
    Manifest(pipeline=sink.pipeline_name, output_id=output_id, ranges=[RangeReport("cdc", 0, 0, n, n, 0, 0, n - 1, 0)],
             rows_in=n, rows_out=n, rows_rejected=0, bytes_in=0, data_files=[str(folder / "part-0.parquet")],
             rejected_files=[], job_seconds=0, spark_version="none",
             attempt=attempt).save(sink.staging.staging_manifest(batch_id, attempt))
    return attempt


def test_upsert_newest_version_wins_in_any_replay_order_and_deletes_stay_deleted(tmp_path):
    """``mode: upsert`` through delta-rs's merge; the table read with Polars."""
    from offsetbatch.errors import SinkSchemaError

    sink = _sink(tmp_path, mode="upsert", key=["id"], version_column="lsn", delete_column="deleted")
    table = str(tmp_path / "t")

    def rows() -> dict[int, int]:
        return dict(verify.delta_rows(table, ["id", "lsn"]))

    sink.publish(1, 1, _stage_changes(sink, 1, 1, [(1, 10, False), (2, 10, False), (3, 10, False)]))
    assert rows() == {1: 10, 2: 10, 3: 10}
    sink.publish(2, 2, _stage_changes(sink, 2, 2, [(1, 20, False), (2, 20, True), (4, 20, False)]))
    assert rows() == {1: 20, 3: 10, 4: 20}
    # batch 1 replayed (older versions of 1 and 2): the newer change still wins, 2 stays deleted
    sink.publish(3, 1, _stage_changes(sink, 3, 1, [(1, 11, False), (2, 11, False), (3, 11, False)]), kind="replay")
    assert rows() == {1: 20, 3: 11, 4: 20}
    # batch 2 replayed without key 4's change: 4 has no change left, so no row
    sink.publish(4, 2, _stage_changes(sink, 4, 2, [(1, 20, False), (2, 20, True)]), kind="replay")
    assert rows() == {1: 20, 3: 11}
    # a crash between the changes' commit and the merge is finished by the next publish
    os.environ["OFFSETBATCH_FAULTS"] = "commit.after_delta_commit"
    try:
        with pytest.raises(Exception, match="injected fault"):
            sink.publish(5, 5, _stage_changes(sink, 5, 5, [(3, 30, True)]))
    finally:
        del os.environ["OFFSETBATCH_FAULTS"]
    assert rows() == {1: 20, 3: 11}
    sink.publish(5, 5, _stage_changes(sink, 5, 5, [(3, 30, True)]))
    assert rows() == {1: 20}
    assert sink.published_ids() == [1, 2, 5]
    # the append mode refuses the upserted table, naming it
    append = _sink(tmp_path)
    with pytest.raises(SinkSchemaError, match="is an upserted table"):
        append.check_writable()


RACE = ("import json, logging, sys\nfrom offsetbatch.sinks.delta import DeltaSettings, DeltaSink\nlogging.basicConfig(level=logging.INFO)\n"
        "DeltaSink('lake', DeltaSettings(**json.loads(sys.argv[1]))).publish(1, 1, sys.argv[2])\n")


@pytest.mark.parametrize("where", ["disk", "s3"])
def test_two_writers_of_one_batch_race_and_it_is_in_the_table_once(where, tmp_path, request, monkeypatch):
    """Two executions of one batch (a task delivered twice, each with its own staged attempt) publish
    at once: A stops between its check and its commit, B publishes the batch (and removes its
    staging, A's attempt too), A checks again and adds nothing: the batch is in the table once. A
    commit that meets another writer's version is the first test's case. On S3Proxy too."""
    settings = {"staging": str(tmp_path / "staging"), "table": str(tmp_path / "t")}
    env = {**os.environ}
    options = None
    if where == "s3":
        from test_object_storage import CONN_ID, _bucket

        from offsetbatch.sinks.delta.table import storage_options

        server = request.getfixturevalue("s3_server")
        conn = json.dumps(server.connection())
        monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", conn)
        env[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = conn
        root = f"s3://{_bucket(server, request)}"
        settings = {"staging": f"{root}/staging", "table": f"{root}/t", "storage_conn_id": CONN_ID}
    from offsetbatch.sinks.delta import DeltaSettings, DeltaSink

    sink = DeltaSink("lake", DeltaSettings(**settings))
    if where == "s3":
        options = storage_options(sink.settings)
    first = _stage_remote(sink, tmp_path, "x1") if where == "s3" else _rename_attempt(sink, _stage_files(sink, 1, 1, [0, 1], 0), "x1")
    second = _stage_remote(sink, tmp_path, "y1") if where == "s3" else _rename_attempt(sink, _stage_files(sink, 1, 1, [0, 1], 0), "y1")
    faults_dir = tmp_path / "faults"
    faults_dir.mkdir()
    a = subprocess.Popen([sys.executable, "-c", RACE, json.dumps(settings), first],
                         env={**env, "OFFSETBATCH_FAULTS": "commit.delta_checked:pause",
                              "OFFSETBATCH_FAULTS_DIR": str(faults_dir)},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _wait_for(faults_dir / "commit.delta_checked.paused", a)
    b = subprocess.run([sys.executable, "-c", RACE, json.dumps(settings), second], env=env, capture_output=True,
                       text=True, timeout=300)
    assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]
    (faults_dir / "commit.delta_checked.resume").touch()
    out, _ = a.communicate(timeout=300)
    assert a.returncode == 0, out[-3000:]
    # B removed every attempt of the batch once published, so A finds its own staged files gone
    # (on the disk and the bucket alike) before its commit; either way A checks the table again
    assert "staged files gone" in out and "already holds this batch" in out, out[-3000:]
    location = settings["table"]
    ids = [e for (e,) in verify.delta_rows(location, ["event_id"], storage_options=options)]
    assert len(ids) == len(set(ids)) == 20
    from deltalake import DeltaTable

    history = DeltaTable(location, storage_options=options).history()
    assert [h.get("offsetbatch.batch-id") for h in history] == ["1"]  # one commit of batch 1, B's


def _rename_attempt(sink, attempt: str, new: str) -> str:
    """The staged attempt moved to another attempt id (a second execution of the batch)."""
    import shutil

    from offsetbatch.jobspec import Manifest

    old_dir, new_dir = Path(sink.staging.attempt(1, attempt)), Path(sink.staging.attempt(1, new))
    shutil.move(old_dir, new_dir)
    m = Manifest.load(str(new_dir / "_manifest.json"))
    m.data_files = [f.replace(f"attempt={attempt}", f"attempt={new}") for f in m.data_files]
    m.attempt = new
    m.save(str(new_dir / "_manifest.json"))
    return new


def _stage_remote(sink, tmp_path: Path, attempt: str) -> str:
    """``_stage_files`` on the disk, then copied to the sink's staging on the bucket."""
    from offsetbatch import storage
    from offsetbatch.jobspec import Manifest
    from offsetbatch.sinks.delta import DeltaSettings, DeltaSink

    local = DeltaSink("lake", DeltaSettings(staging=str(tmp_path / attempt), table=str(tmp_path / "unused")))
    staged = _stage_files(local, 1, 1, [0, 1], 0)
    m = Manifest.load(local.staging.staging_manifest(1, staged))
    files = []
    for f in m.data_files:
        rest = f.split(f"attempt={staged}/", 1)[1]
        dst = f"{sink.staging.attempt(1, attempt)}/{rest}"
        with storage.open_write(dst) as out:
            out.write(Path(f).read_bytes())
        files.append(dst)
    m.data_files, m.attempt = files, attempt
    m.save(sink.staging.staging_manifest(1, attempt))
    return attempt
