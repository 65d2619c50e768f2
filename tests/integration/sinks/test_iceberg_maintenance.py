"""Iceberg maintenance (issue 43, "a year unattended") on a real pyiceberg SQL catalog (SQLite) and
a local warehouse, without Spark: batches go through the sink's own ``publish`` from Parquet staged
the way the job stages it (pyarrow instead of Spark) with a manifest, then ``IcebergSink.maintenance``
compacts, expires (markers archived first), deletes and sweeps. Every claim is checked against the
table as pyiceberg reads it, and the markers (published ids and manifests, live attempts, applied
batches, locations) are compared before and after, also after a kill -9 at each fault point."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from offsetbatch.jobspec import Manifest, RangeReport
from offsetbatch.sinks import settings_for
from offsetbatch.sinks.iceberg import IcebergSink, maintenance, markers
from offsetbatch.sinks.iceberg.catalog import open_catalog
from offsetbatch.sinks.iceberg.rewrite import batch_bounds
from offsetbatch.sinks.maintenance import Horizon, MaintenanceSettings

pytestmark = pytest.mark.integration
MiB = 1024 * 1024
PIPELINE = "events"
PASS = """
import json, sys
from datetime import datetime
from offsetbatch.sinks import settings_for
from offsetbatch.sinks.iceberg import IcebergSink
from offsetbatch.sinks.maintenance import Horizon, MaintenanceSettings
cfg, policy, horizon = (json.loads(a) for a in sys.argv[1:4])
sink = IcebergSink("events", settings_for(cfg))
h = Horizon(*(datetime.fromisoformat(horizon[k]) for k in ("now", "retain_before", "grace_before", "ledger_before")))
for action in sink.maintenance(MaintenanceSettings(**policy), h):
    print(action.describe(), action.apply(), flush=True)
"""


def _horizon(expire: bool = True) -> Horizon:
    """Everything is old enough (``expire``), or nothing is."""
    now = datetime.now(timezone.utc)
    edge = now + timedelta(seconds=5) if expire else now - timedelta(days=1)
    return Horizon(now=now, retain_before=edge, grace_before=edge, ledger_before=now)


class Harness:
    """A sink on a fresh catalog and warehouse, and the rows each output id should hold."""

    def __init__(self, tmp_path: Path, upserts: bool = False, partitioned: bool = False):
        self.cfg = {"type": "iceberg", "staging": str(tmp_path / "staging"), "namespace": "ns", "table": "events",
                    "warehouse": str(tmp_path / "wh"), "catalog": f"sqlite:///{tmp_path}/catalog.db"}
        if partitioned:
            self.cfg["partition_by"] = ["kafka_partition"]
        if upserts:
            self.cfg.update(mode="upsert", key=["id"], version_column="lsn")
        self.sink = IcebergSink(PIPELINE, settings_for(self.cfg))
        self.expected: dict[int, list[tuple]] = {}  # output id -> (id, name, lsn, partition, offset, batch_id)
        self.rejected: dict[int, list[tuple]] = {}

    def rows(self, batch_id: int, output_id: int, version: int) -> list[tuple]:
        first = output_id * 10  # the target's offsets: a replay re-reads them
        return [(first + i, f"v{version}-{first + i}", first + i + version, i % 2, first + i, output_id)
                for i in range(9)]

    def publish(self, batch_id: int, output_id: int | None = None, version: int = 0, superseded: tuple = (),
                kind: str = "incremental", attempt: str | None = None) -> None:
        output_id = batch_id if output_id is None else output_id
        attempt = attempt or f"a{batch_id}"  # unique, as a Spark attempt's name is
        rows = self.rows(batch_id, output_id, version)
        layout = self.sink.staging
        data_files = []
        for part in (0, 1):  # one file per Kafka partition: what stage_partitions gives a partitioned table
            mine = [r for r in rows if r[3] == part]
            path = f"{layout.staging_data(batch_id, attempt)}/part-0000{part}.parquet"
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table({
                "id": pa.array([r[0] for r in mine], pa.int64()), "name": pa.array([r[1] for r in mine]),
                "lsn": pa.array([r[2] for r in mine], pa.int64()), "kafka_topic": pa.array(["t"] * len(mine)),
                "kafka_partition": pa.array([r[3] for r in mine], pa.int32()),
                "kafka_offset": pa.array([r[4] for r in mine], pa.int64()),
                "batch_id": pa.array([r[5] for r in mine], pa.int64())}), path)
            data_files.append(path)
        rejected = (output_id * 10 + 9, f"bad-{version}".encode(), output_id)
        rpath = f"{layout.staging_rejected(batch_id, attempt)}/part-00000.parquet"
        Path(rpath).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"kafka_topic": ["t"], "kafka_partition": pa.array([1], pa.int32()),
                                 "kafka_offset": pa.array([rejected[0]], pa.int64()), "value": [rejected[1]],
                                 "error": ["malformed"], "batch_id": pa.array([output_id], pa.int64())}), rpath)
        ranges = [RangeReport("t", 0, output_id * 10, output_id * 10 + 5, 5, 0),
                  RangeReport("t", 1, output_id * 10 + 5, output_id * 10 + 10, 4, 1)]
        Manifest(pipeline=PIPELINE, output_id=output_id, ranges=ranges, rows_in=10, rows_out=9, rows_rejected=1,
                 bytes_in=1000 + batch_id, data_files=data_files, rejected_files=[rpath], job_seconds=1.5 + batch_id,
                 spark_version="4.3.0", attempt=attempt).save(layout.staging_manifest(batch_id, attempt))
        self.sink.publish(batch_id, output_id, attempt, superseded, kind)
        self.expected[output_id], self.rejected[output_id] = rows, [rejected]
        for old in superseded:
            if old != output_id:
                self.expected.pop(old, None)
                self.rejected.pop(old, None)

    def retire(self, output_id: int) -> None:
        self.sink.retire(output_id)
        self.expected.pop(output_id, None)
        self.rejected.pop(output_id, None)

    def table(self, ident: tuple[str, str]):
        with open_catalog(self.sink.settings, PIPELINE) as catalog:
            return catalog.load_table(ident)

    def check_rows(self) -> None:
        """Every expected row exactly once, nothing else (row by row, pyiceberg's scan)."""
        s = self.sink.settings
        got = sorted((r["id"], r["name"], r["lsn"], r["kafka_partition"], r["kafka_offset"], r["batch_id"])
                     for r in self.table(s.marked_identifier).scan().to_arrow().to_pylist())
        assert got == sorted(r for rows in self.expected.values() for r in rows)
        rejected = sorted((r["kafka_offset"], r["value"], r["batch_id"])
                          for r in self.table(s.rejected_identifier).scan().to_arrow().to_pylist())
        assert rejected == sorted(r for rows in self.rejected.values() for r in rows)
        if s.upserts:  # one row per key: each key's only change (keys never repeat across outputs here)
            view = sorted((r["id"], r["name"]) for r in self.table(s.identifier).scan().to_arrow().to_pylist())
            assert view == sorted((r[0], r[1]) for rows in self.expected.values() for r in rows)

    def markers_state(self, batch_ids: range) -> dict:
        """What exactly-once reads from the markers."""
        s = self.sink.settings
        data, rejected = self.table(s.marked_identifier), self.table(s.rejected_identifier)
        return {"ids": self.sink.published_ids(),
                "manifests": {i: asdict(m) for i, m in self.sink.published_manifests().items()},
                "live": {i: (m.snapshot_id, m.batch_id, m.attempt) for i, m in markers.live(data).items()},
                "rejected_live": {i: m.snapshot_id for i, m in markers.live(rejected).items()},
                "applied": [b for b in batch_ids if markers.applied(data, b) is not None],
                "rejected_applied": [b for b in batch_ids if markers.applied(rejected, b) is not None],
                "locations": self.sink.locations_of(list(batch_ids))}

    def tables(self) -> list:
        return [self.table(o.ident) for o in maintenance.owned_tables(self.sink)]

    def files(self) -> dict[str, float]:
        root = Path(self.cfg["warehouse"])
        return {str(p): p.stat().st_mtime for p in root.rglob("*") if p.is_file()}


def _policy(**kw) -> MaintenanceSettings:
    return MaintenanceSettings(**{"retain_snapshots": 5, "target_file_size": MiB, "min_input_files": 4, **kw})


def _run(sink: IcebergSink, policy: MaintenanceSettings, horizon: Horizon) -> list[tuple[str, str, dict]]:
    return [(a.step, a.target, a.apply()) for a in sink.maintenance(policy, horizon)]


def _nothing_unreferenced(h: Harness) -> None:
    """No file under any table that no snapshot, metadata file or the archive names; no intent."""
    far = Horizon(*([datetime.now(timezone.utc) + timedelta(days=1)] * 4))
    for table in h.tables():
        assert maintenance.orphan_files(table, far) == [], table.name()
        assert not maintenance._intents(table)


def _history(h: Harness, batches: int = 30) -> range:
    """``batches`` batches, a replay of batch 12 (a new version of its rows) and a rewind that
    supersedes output 20: markers that retire, replace and add."""
    for b in range(1, batches + 1):
        h.publish(b)
    h.publish(batches + 1, output_id=12, version=1, kind="replay")
    h.publish(batches + 2, version=0, superseded=(20,), kind="incremental")
    h.retire(20)
    return range(1, batches + 3)


def test_many_batches_expire_with_markers_archived_and_their_files_deleted(tmp_path):
    h = Harness(tmp_path)
    ids = _history(h)
    policy, horizon = _policy(retain_snapshots=3), _horizon()
    data = h.table(h.sink.settings.marked_identifier)
    metadata_before = Path(data.metadata_location.removeprefix("file://")).stat().st_size
    snapshots_before = len(data.snapshots())
    before, files_before = h.markers_state(ids), h.files()

    listed = h.sink.maintenance(policy, horizon)  # a dry run: listing changes nothing
    assert [a.step for a in listed] == ["iceberg.compact"] * 2 + ["iceberg.expire-snapshots"] * 2 \
        + ["iceberg.delete-expired-files"] * 2 + ["iceberg.remove-orphans"] * 2
    print("\n".join(a.describe() for a in listed))
    expire = listed[2]
    assert expire.summary.startswith(f"expire {snapshots_before - 3} of {snapshots_before} snapshot(s) older than")
    assert "(keeping the newest 3)" in expire.summary
    assert h.files() == files_before and h.markers_state(ids) == before

    done = [(a.step, a.apply()) for a in listed]
    assert done[0] == ("iceberg.compact", {"files_in": 60, "files_out": 1})  # 30 outputs, 2 files each
    assert done[1] == ("iceberg.compact", {"files_in": 30, "files_out": 1})  # their rejected records
    data = h.table(h.sink.settings.marked_identifier)
    assert len(data.snapshots()) == 3 and len(data.metadata.snapshot_log) == 3
    assert len(data.metadata.metadata_log) <= maintenance.METADATA_VERSIONS
    assert Path(data.metadata_location.removeprefix("file://")).stat().st_size < metadata_before / 3
    assert h.markers_state(ids) == before
    h.check_rows()
    _nothing_unreferenced(h)
    replaced = Path(h.cfg["warehouse"], "ns", "events", "data", "batch_id=12", "attempt=a12")
    assert not list(replaced.glob("*.parquet"))  # only expired snapshots had the replay's old files
    assert list(Path(h.cfg["warehouse"], "ns", "events", "data", "batch_id=12", "attempt=a31").glob("*.parquet"))
    # the per-batch history is in the archive: metadata.json holds the retained snapshots' markers only
    assert Path(data.metadata_location.removeprefix("file://")).read_text().count('"offsetbatch.batch-id"') <= 3

    assert h.sink.maintenance(policy, horizon) == []  # a second pass has nothing to do
    h.publish(ids.stop, kind="incremental")  # and publishing goes on over the archive
    assert markers.applied(data, 3) is not None and h.sink.published_ids() == sorted(h.expected)
    h.publish(ids.stop + 1, output_id=5, version=2, kind="replay")  # a replay of an archived batch
    h.check_rows()


def test_dry_run_of_a_full_pass_changes_nothing(tmp_path):
    h = Harness(tmp_path)
    ids = _history(h, 8)
    before, files = h.markers_state(ids), h.files()
    locations = [t.metadata_location for t in h.tables()]
    actions = h.sink.maintenance(_policy(retain_snapshots=2), _horizon())
    assert {a.step for a in actions} >= {"iceberg.compact", "iceberg.expire-snapshots", "iceberg.delete-expired-files"}
    assert all(a.summary and a.counts for a in actions)
    assert h.files() == files and [t.metadata_location for t in h.tables()] == locations
    assert h.markers_state(ids) == before


@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
def test_compaction_then_replay_and_retire_keep_every_row_exactly_once(tmp_path, partitioned):
    h = Harness(tmp_path, partitioned=partitioned)
    for b in range(1, 11):
        h.publish(b)
    ids = range(1, 11)
    before = h.markers_state(ids)
    done = _run(h.sink, _policy(), _horizon(expire=False))
    assert [step for step, _, _ in done] == ["iceberg.compact"] * 2
    data = h.table(h.sink.settings.marked_identifier)
    files = [t.file for t in data.scan().plan_files()]
    assert len(files) == (2 if partitioned else 1)  # one per partition
    assert {batch_bounds(data, f) for f in files} == {(1, 10)}
    assert data.current_snapshot().summary.additional_properties.get("offsetbatch.compaction")
    assert h.markers_state(ids) == before  # the compaction snapshot is no marker
    h.check_rows()

    h.publish(11, output_id=5, version=1, kind="replay")  # a middle batch, with new rows
    h.check_rows()
    data = h.table(h.sink.settings.marked_identifier)
    assert markers.live(data)[5].batch_id == 11
    h.retire(7)
    h.check_rows()
    assert h.sink.published_ids() == [1, 2, 3, 4, 5, 6, 8, 9, 10]
    data = h.table(h.sink.settings.marked_identifier)
    snapshot, files = data.current_snapshot().snapshot_id, {t.file.file_path for t in data.scan().plan_files()}
    h.retire(7)  # again (the commit's publication retires every superseded id): the compacted file spans 7's
    data = h.table(h.sink.settings.marked_identifier)  # id but holds none of its rows: nothing is rewritten
    assert data.current_snapshot().snapshot_id == snapshot
    assert {t.file.file_path for t in data.scan().plan_files()} == files
    h.publish(12, superseded=(3,))  # a rewind in one snapshot over a compacted file
    h.check_rows()


def test_upsert_refresh_stays_right_after_compaction_and_expiry_of_either_table(tmp_path):
    h = Harness(tmp_path, upserts=True)
    for b in range(1, 9):
        h.publish(b)
    h.check_rows()
    ids = range(1, 9)
    before = h.markers_state(ids)
    done = _run(h.sink, _policy(retain_snapshots=2), _horizon())
    steps = {(step, target) for step, target, _ in done}
    for table in ("ns.events_changes", "ns.events"):
        assert ("iceberg.compact", f"Iceberg table {table}") in steps
        assert ("iceberg.expire-snapshots", f"Iceberg table {table}") in steps
    assert h.markers_state(ids) == before
    h.check_rows()
    from offsetbatch.sinks.iceberg import upsert

    view, changes = h.table(h.sink.settings.identifier), h.table(h.sink.settings.marked_identifier)
    assert upsert.reflected(view) == changes.current_snapshot().snapshot_id
    h.publish(9, output_id=4, version=1, kind="replay")  # changed rows of a compacted, archived batch
    h.publish(10)
    h.check_rows()
    _run(h.sink, _policy(retain_snapshots=2), _horizon())
    h.publish(11, output_id=2, version=3, kind="replay")
    h.check_rows()
    _nothing_unreferenced(h)


FAULT_POINTS = [maintenance.COMPACTION_WRITTEN, maintenance.ARCHIVE_WRITTEN, maintenance.EXPIRED,
                maintenance.DELETING]


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_a_pass_killed_at_each_point_is_finished_by_the_next(tmp_path, point):
    h = Harness(tmp_path)
    ids = _history(h, 12)
    before = h.markers_state(ids)
    policy, horizon = _policy(retain_snapshots=3), _horizon()
    args = [json.dumps(h.cfg), json.dumps(policy.model_dump()),
            json.dumps({k: getattr(horizon, k).isoformat() for k in ("now", "retain_before", "grace_before",
                                                                     "ledger_before")})]
    env = {**os.environ, "OFFSETBATCH_FAULTS": f"{point}:kill"}
    out = subprocess.run([sys.executable, "-c", PASS, *args], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == -signal.SIGKILL, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"SIGKILL at {point}" in out.stderr
    data = h.table(h.sink.settings.marked_identifier)
    metadata = Path(data.location().removeprefix("file://"), "metadata")
    left = {p.name.split("-")[1] for p in metadata.glob("offsetbatch-*")}
    assert left == {maintenance.COMPACTION_WRITTEN: set(), maintenance.ARCHIVE_WRITTEN: {"markers"},
                    maintenance.EXPIRED: {"markers", "expire"}, maintenance.DELETING: {"markers", "expire"}}[point]
    committed = markers.archive_ref(data) is not None  # at ARCHIVE_WRITTEN: the file written, not committed
    assert committed == (point in (maintenance.EXPIRED, maintenance.DELETING))
    h.check_rows()
    assert h.markers_state(ids) == before  # a reader in between sees the same markers

    done = _run(h.sink, policy, _horizon())  # the next pass (its grace covers what the killed one wrote)
    steps = [step for step, _, _ in done]
    if point in (maintenance.EXPIRED, maintenance.DELETING):
        assert steps[0] == "iceberg.finish-expiry" and done[0][2]["files"] > 0
    h.check_rows()
    assert h.markers_state(ids) == before
    _nothing_unreferenced(h)
    for table in h.tables():
        assert len(table.snapshots()) <= 3
    assert h.sink.maintenance(policy, _horizon()) == []


def test_the_orphan_sweep_keeps_young_files_and_removes_old_ones(tmp_path):
    """A file no snapshot names yet may be an attempt moved under data/ just before its commit."""
    h = Harness(tmp_path)
    for b in range(1, 3):
        h.publish(b)
    location = Path(h.cfg["warehouse"], "ns", "events")
    stray = location / "data" / "batch_id=3" / "attempt=a3" / "part-00000.parquet"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"in flight")
    young = Horizon(*([datetime.now(timezone.utc) - timedelta(hours=1)] * 4))
    assert h.sink.maintenance(_policy(min_input_files=8), young) == [] and stray.exists()
    old = datetime.now(timezone.utc) - timedelta(hours=2)
    os.utime(stray, (old.timestamp(), old.timestamp()))
    done = _run(h.sink, _policy(min_input_files=8), young)
    assert done == [("iceberg.remove-orphans", "Iceberg table ns.events", {"files": 1})] and not stray.exists()
    h.check_rows()


def test_an_intent_whose_expiry_never_committed_deletes_nothing_a_snapshot_has(tmp_path):
    """Killed between the intent and the expiry commit: every file it lists is still referenced."""
    from offsetbatch import storage

    h = Harness(tmp_path)
    for b in range(1, 4):
        h.publish(b)
    data = h.table(h.sink.settings.marked_identifier)
    listed = sorted(maintenance.unreferenced(data, {s.snapshot_id for s in data.snapshots()[:-1]}))
    assert listed  # what expiring all but the current snapshot would delete
    storage.write_json(f"{data.location()}/metadata/{maintenance.INTENT_PREFIX}x.json", {"files": listed + [
        t.file.file_path for t in data.scan().plan_files()]})
    done = _run(h.sink, _policy(min_input_files=8), _horizon(expire=False))
    assert done == [("iceberg.finish-expiry", "Iceberg table ns.events", {"intents": 1, "files": 0})]
    assert not maintenance._intents(h.table(h.sink.settings.marked_identifier))
    h.check_rows()
    assert h.markers_state(range(1, 4))["ids"] == [1, 2, 3]
