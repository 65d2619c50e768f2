"""The iceberg sink with the real broker, Spark and Airflow, and pyiceberg's SQL catalog on the
test PostgreSQL and on SQLite: each batch one Iceberg snapshot carrying its offset ranges
(docs/architecture.md, *The Iceberg sink*). Tables are read back with pyiceberg and Polars, not
with the sink's code.

DAG runs are few (5 in all): the crash cases drive the commit task's own code
(``tasks.commit_step``) in a subprocess against a batch a real run planned and staged, which is
the process a kill -9 hits in production.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from harness import assert_rebuild_matches_ledger, sample_sink

from offsetbatch.config import PIPELINES_DIR, load_config
from offsetbatch_dev import verify

pytestmark = [pytest.mark.integration, pytest.mark.spark_connect]  # Spark jobs on the suite's Connect server
BASE = datetime(2026, 11, 3, tzinfo=timezone.utc)
H = timedelta(hours=1)
TABLE = "sample.sample_events"
COMMIT = ("import sys\nfrom offsetbatch.dag.tasks import commit_step\nfrom offsetbatch.pipeline import Pipeline\n"
          "print(commit_step(Pipeline.load(sys.argv[1]), [int(sys.argv[2])], sys.argv[3]))\n")


def _sample_pipeline(make_pipeline, ledger_url: str | None = None):
    """The sample pipeline's Iceberg variant (its value schema, transform and sink) on a test topic,
    the catalog in the ledger's database (PostgreSQL), or next to a SQLite ledger."""
    sample = yaml.safe_load((PIPELINES_DIR / "iceberg" / "sample_events_iceberg.yaml").read_text())
    p = make_pipeline(ledger_url=ledger_url, value=sample["value"], transform=sample["transform"],
                      sink={**sample_sink("iceberg"), "event_time_column": None})
    cfg = yaml.safe_load(p.config_path.read_text())
    cfg["sink"]["warehouse"] = str(p.root / "warehouse")
    p.config_path.write_text(yaml.safe_dump(cfg))
    p.cfg = load_config(p.config_path)
    assert p.cfg.sink.type == "iceberg" and p.cfg.sink.catalog_is_ledger
    url = ledger_url if ledger_url else f"sqlite:///{p.root}/ledger.iceberg.db"
    return p, url


def _snapshots(url: str, table: str = TABLE) -> list[dict]:
    """Every snapshot of the table (oldest first): id, operation, and its offsetbatch summary."""
    t = verify.iceberg_table(url, table)
    if t is None:
        return []
    return [{"id": s.snapshot_id, "op": s.summary.operation.value,
             **{k.removeprefix("offsetbatch."): v for k, v in s.summary.additional_properties.items()
                if k.startswith("offsetbatch.")}}
            for s in sorted(t.snapshots(), key=lambda s: s.sequence_number)]


def _summary_ranges_match_ledger(p, url: str) -> None:
    """Each snapshot's ranges are exactly the ledger's ranges of the batch it published."""
    for snap in _snapshots(url):
        batch = p.ledger.get_batch(p.name, int(snap["batch-id"]))
        assert batch.status == "committed" and int(snap["output-id"]) == batch.output_id
        assert sorted((r["topic"], r["partition"], r["from_offset"], r["until_offset"])
                      for r in json.loads(snap["ranges"])) \
            == sorted((r.topic, r.partition, r.from_offset, r.until_offset) for r in batch.ranges), snap
        assert int(snap["rows-out"]) == batch.stats["rows_out"]


def _staged_attempt(p, batch_id: int) -> str:
    found = list(Path(p.table, "_offsetbatch", "attempts", f"batch_id={batch_id}").glob("attempt=*/_manifest.json"))
    assert len(found) == 1, found
    return found[0].parent.name.removeprefix("attempt=")


def _commit(p, batch_id: int, attempt: str, faults: str | None = None) -> subprocess.CompletedProcess:
    """The commit task's logic (``tasks.commit_step``) in its own process, as the task runs it."""
    env = {k: v for k, v in p.env.items() if k != "OFFSETBATCH_FAULTS"}
    if faults:
        env["OFFSETBATCH_FAULTS"] = faults
    return subprocess.run([sys.executable, "-c", COMMIT, str(p.config_path), str(batch_id), attempt], env=env,
                          capture_output=True, text=True, timeout=300)


def _per_batch(url: str, snapshot_id: int | None = None) -> dict[int, int]:
    counts: dict[int, int] = {}
    for (b,) in verify.iceberg_rows(url, TABLE, ["batch_id"], snapshot_id):
        counts[b] = counts.get(b, 0) + 1
    return counts


def test_hourly_kill9_at_each_commit_boundary_and_replay_postgres_catalog(make_pipeline, postgres):
    import polars as pl

    ledger_url = postgres.create_database(f"ice_{uuid.uuid4().hex[:8]}")
    p, url = _sample_pipeline(make_pipeline, ledger_url)
    p.produce(1200, start=BASE, hours=2)

    # hour 1: one snapshot, its summary naming batch 1's ranges
    first = p.run(BASE)
    assert first.ok, first.output[-4000:]
    assert [s["batch-id"] for s in _snapshots(url)] == ["1"]
    _summary_ranges_match_ledger(p, url)

    # hour 2: plan and Spark job run, the commit task dies before touching the ledger
    crashed = p.run(BASE + H, faults="commit.before_transaction")
    crashed.assert_failed_with("injected fault at commit.before_transaction")
    attempt = _staged_attempt(p, 2)

    def state() -> dict:
        return {"data": [s["id"] for s in _snapshots(url)],
                "rejected": [s["id"] for s in _snapshots(url, f"{TABLE}_rejected")],
                "batch": p.ledger.get_batch(p.name, 2).status, "published": p.ledger.get_batch(p.name, 2).stats["published_at"]}

    before = state()
    # kill -9 after the ledger transaction: committed in the ledger, the table untouched
    out = _commit(p, 2, attempt, "commit.after_transaction:kill")
    assert out.returncode == -signal.SIGKILL and "SIGKILL at commit.after_transaction" in out.stdout + out.stderr
    after_ledger = state()
    assert after_ledger["batch"] == "committed" and after_ledger["published"] is None
    assert (after_ledger["data"], after_ledger["rejected"]) == (before["data"], before["rejected"])

    # kill -9 inside the Iceberg commit (new metadata file written, catalog row not swapped): no snapshot
    metadata_dir = Path(p.root, "warehouse", "sample", "sample_events", "metadata")
    files_before, current = set(metadata_dir.glob("*.metadata.json")), verify.iceberg_table(url, TABLE).metadata_location
    out = _commit(p, 2, attempt, "commit.iceberg_metadata_written:kill")
    assert out.returncode == -signal.SIGKILL, out.stdout[-3000:] + out.stderr[-3000:]
    assert state() == after_ledger
    assert set(metadata_dir.glob("*.metadata.json")) - files_before  # the new metadata the crash left behind
    assert verify.iceberg_table(url, TABLE).metadata_location == current

    # kill -9 after the table's snapshot commit, before the ledger marks it published
    out = _commit(p, 2, attempt, "commit.after_iceberg_commit:kill")
    assert out.returncode == -signal.SIGKILL, out.stdout[-3000:] + out.stderr[-3000:]
    half = state()
    assert len(half["data"]) == len(before["data"]) + 1 and half["published"] is None

    # the rerun rolls forward: the table's snapshot is not added again
    out = _commit(p, 2, attempt)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    done = state()
    assert done["data"] == half["data"] and done["published"] is not None
    assert [s["batch-id"] for s in _snapshots(url)] == ["1", "2"]
    assert [s["batch-id"] for s in _snapshots(url, f"{TABLE}_rejected")] == ["1", "2"]
    report = verify.check_iceberg(url, TABLE, p.expected_ids(), p.malformed(), p.ledger, p.name)
    assert report.ok, report.summary()
    _summary_ranges_match_ledger(p, url)
    assert _per_batch(url) == {b.batch_id: b.stats["rows_out"] for b in p.ledger.list_batches(p.name, 10)}
    table = verify.iceberg_table(url, TABLE)
    assert pl.scan_iceberg(table).select(pl.len()).collect().item() == len(p.expected_ids())  # a second reader
    assert not Path(p.table, "_offsetbatch", "attempts", "batch_id=2").exists()

    # replay of batch 1 after a transform change (and a new column): one snapshot replaces it
    pinned = table.current_snapshot().snapshot_id
    old_rows = verify.iceberg_rows(url, TABLE, ["event_id", "kind", "batch_id"], pinned)
    cfg = yaml.safe_load(p.config_path.read_text())
    cfg["transform"]["sql"] = cfg["transform"]["sql"].replace("SELECT event_id, kind,",
                                                              "SELECT event_id, upper(kind) AS kind, length(page) AS page_len,")
    p.config_path.write_text(yaml.safe_dump(cfg))
    p.cfg = load_config(p.config_path)
    replay = p.run(None, conf={"mode": "replay", "batch_ids": "1", "reason": "transform changed"})
    assert replay.ok, replay.output[-4000:]
    snaps = _snapshots(url)
    assert [(s["batch-id"], s["output-id"], s["kind"], s["op"]) for s in snaps[2:]] == [("3", "1", "replay", "overwrite")]
    # a reader pinned to the snapshot before the replay still sees the old rows; the current one only the new
    assert sorted(verify.iceberg_rows(url, TABLE, ["event_id", "kind", "batch_id"], pinned)) == sorted(old_rows)
    rows = verify.iceberg_rows(url, TABLE, ["event_id", "kind", "batch_id", "page_len"])
    one = [r for r in rows if r[2] == 1]
    assert sorted(e for e, *_ in one) == sorted(e for e, _, b in old_rows if b == 1)  # the same records
    assert all(k in ("CLICK", "PURCHASE") and n is not None for _, k, _, n in one)  # the new transform's
    assert sorted((e, k, b) for e, k, b, _ in rows if b == 2) == sorted(r for r in old_rows if r[2] == 2)
    assert all(n is None for *_, b, n in rows if b == 2)  # older files read the new column as null
    report = verify.check_iceberg(url, TABLE, p.expected_ids(), p.malformed(), p.ledger, p.name)
    assert report.ok, report.summary()


def test_sqlite_catalog_and_a_refused_type_change(make_pipeline):
    """(A column added between two runs: the replay in the test above.)"""
    p, url = _sample_pipeline(make_pipeline)  # SQLite ledger: the catalog is ledger.iceberg.db next to it
    p.produce(600, start=BASE, hours=2)
    first = p.run(BASE)
    assert first.ok, first.output[-4000:]
    assert Path(url.removeprefix("sqlite:///")).exists()

    # user_id becomes a string (and a column is added): refused before the ledger transaction, naming
    # the column, without retries; nothing reaches the table, not even the new column
    snapshots = [s["id"] for s in _snapshots(url)]
    cfg = yaml.safe_load(p.config_path.read_text())
    cfg["transform"]["sql"] = cfg["transform"]["sql"].replace(
        " user_id,", " CAST(user_id AS STRING) AS user_id, length(page) AS page_len,")
    p.config_path.write_text(yaml.safe_dump(cfg))
    second = p.run(BASE + H)
    second.assert_failed_with("column 'user_id' is int in the table but the batch's rows have string")
    assert "AirflowFailException" in second.output
    assert p.ledger.get_batch(p.name, 2).status == "planned"
    assert [s["id"] for s in _snapshots(url)] == snapshots
    assert "page_len" not in verify.iceberg_table(url, TABLE).schema().column_names
    read = _read_offsets(p)
    report = verify.check_iceberg(url, TABLE, {i for po, i in p.produced.items() if i and po in read}, None,
                                  p.ledger, p.name)
    assert report.ok, report.summary()

    # `offsetbatch batch` names the snapshot that holds the batch
    res = subprocess.run(["offsetbatch", "--pipelines", str(p.root), "--json", "batch", p.name, "1"], env=p.env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    shown = json.loads(res.stdout)["output"]
    assert shown["snapshot"] == next(str(s["id"]) for s in _snapshots(url) if s["batch-id"] == "1")
    assert shown["table"] == f"offsetbatch.{TABLE}"

    # a lost ledger is rebuilt from the snapshot summaries alone: the same ranges and frontier
    assert_rebuild_matches_ledger(p)


def _read_offsets(p) -> set[tuple[int, int]]:
    """(partition, offset) of every record of a committed batch."""
    return {(r.partition, o) for b in p.ledger.list_batches(p.name, 100) if b.status == "committed"
            for r in b.ranges for o in range(r.from_offset, r.until_offset)}


def _stage_files(sink, batch_id: int, output_id: int, days: list[int], start: int) -> str:
    """Parquet where the Spark job leaves it for attempt 'a<batch_id>' (one file per UTC day, as
    ``stage`` partitions), and its manifest."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from offsetbatch.jobspec import Manifest, RangeReport

    attempt = f"a{batch_id}"
    files = []
    for i, day in enumerate(days):
        folder = Path(sink.staging.staging_data(batch_id, attempt)) / f"_p0={day}"
        folder.mkdir(parents=True, exist_ok=True)
        offsets = list(range(start + 10 * i, start + 10 * i + 10))
        pq.write_table(pa.table({
            "event_id": [f"e{o}" for o in offsets],
            "event_time": pa.array([datetime(2026, 1, 1, 23, 59, tzinfo=timezone.utc) + timedelta(days=day)] * 10,
                                   pa.timestamp("us", tz="UTC")),
            "kafka_offset": pa.array(offsets, pa.int64()),
            "batch_id": pa.array([output_id] * 10, pa.int64())}), folder / "part-0.parquet")
        files.append(str(folder / "part-0.parquet"))
    Path(sink.staging.staging_rejected(batch_id, attempt)).mkdir(parents=True, exist_ok=True)
    n = 10 * len(days)
    Manifest(pipeline=sink.pipeline_name, output_id=output_id, ranges=[RangeReport("t", 0, start, start + n, n, 0, start,
                                                                              start + n - 1, 0)],
             rows_in=n, rows_out=n, rows_rejected=0, bytes_in=0, data_files=files, rejected_files=[], job_seconds=0,
             spark_version="none", attempt=attempt).save(sink.staging.staging_manifest(batch_id, attempt))
    return attempt


def test_a_rewind_is_one_snapshot_and_day_partitions_come_from_the_files(tmp_path):
    """No DAG run: the commit half on staged Parquet, against a real SQLite SQL catalog."""
    from offsetbatch.sinks.iceberg import IcebergSettings, IcebergSink

    url = f"sqlite:///{tmp_path}/catalog.db"
    sink = IcebergSink("rewind", IcebergSettings(path=str(tmp_path / "staging"), catalog=url, namespace="ns",
                                                 table="ev", warehouse=str(tmp_path / "wh"),
                                                 partition_by=["day(event_time)"]))
    for batch_id, start in ((1, 0), (2, 20)):
        sink.publish(batch_id, batch_id, _stage_files(sink, batch_id, batch_id, [0, 1], start), kind="incremental")
    assert sink.published_ids() == [1, 2]
    # each file's partition is its UTC day, read from the file's bounds (23:59 UTC stays on its day)
    table = verify.iceberg_table(url, "ns.ev")
    days = sorted({(t.file.partition[0], t.file.record_count) for t in table.scan().plan_files()})
    assert days == [(20454, 10), (20455, 10)]  # 2026-01-01 and 2026-01-02, days since 1970-01-01

    # a rewind: batch 3 re-read batch 2's offsets (and more); one snapshot drops 2 and adds 3
    before = len(table.snapshots())
    sink.publish(3, 3, _stage_files(sink, 3, 3, [0, 1, 2], 20), superseded=[2], kind="incremental")
    table = verify.iceberg_table(url, "ns.ev")
    assert len(table.snapshots()) == before + 1
    assert table.current_snapshot().summary.additional_properties["offsetbatch.retired"] == "2"
    assert sorted({b for (b,) in verify.iceberg_rows(url, "ns.ev", ["batch_id"])}) == [1, 3]
    assert sink.published_ids() == [1, 3]
    ids = [e for (e,) in verify.iceberg_rows(url, "ns.ev", ["event_id"])]
    assert len(ids) == len(set(ids)) == 20 + 30
    sink.retire(2)  # what the commit calls afterwards: nothing left to remove, no snapshot
    assert len(verify.iceberg_table(url, "ns.ev").snapshots()) == before + 1
