"""Issue 43, files sink: a closed day's small files compacted into files of the target size, atomically
for readers; replays and retirements of compacted batches still replace exactly their rows; abandoned
attempts, trash and old rejected records deleted past the retention; a SIGKILL at every step
finished by the next pass or publish. Real Parquet files published through ``FilesSink.publish``
(staged the way the job stages them), read back with pyarrow's dataset reader as a reader would."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from offsetbatch.jobspec import Manifest, RangeReport
from offsetbatch.sinks.files import FilesSink
from offsetbatch.sinks.files import groups
from offsetbatch.sinks.files import layout as where
from offsetbatch.sinks.maintenance import Horizon, MaintenanceSettings, MiB

pytestmark = pytest.mark.integration

DAY = 86400.0
DATES = ("2026-11-25", "2026-11-26")
POLICY = MaintenanceSettings(target_file_size=MiB, min_input_files=4, retain="7d", in_flight_grace="1d")
ROWS = 2500  # per batch and date: about 100 kB of Parquet, so a day's partition makes several target files


def _horizon(policy: MaintenanceSettings = POLICY) -> Horizon:
    now = datetime.now(timezone.utc)
    return Horizon(now, now - timedelta(seconds=policy.retain), now - timedelta(seconds=policy.in_flight_grace),
                   now - timedelta(days=90))


def _rows(output_id: int, generation: int, date: str, n: int, extra: bool = False) -> pa.Table:
    """Rows whose ``value`` names their batch and generation; random payload so they do not compress."""
    first = output_id * 100_000 + DATES.index(date) * 50_000
    offsets = list(range(first, first + n))
    columns = {"offset": pa.array(offsets, pa.int64()),
               "value": pa.array([f"b{output_id}-g{generation}-{o}" for o in offsets]),
               "payload": pa.array([os.urandom(24).hex() for _ in offsets]),
               "event_time": pa.array([datetime.fromisoformat(date).replace(tzinfo=timezone.utc)] * n,
                                      pa.timestamp("us", tz="UTC"))}
    if extra:
        columns["extra"] = pa.array(["x"] * n)
    return pa.table(columns)


def _stage(sink: FilesSink, batch_id: int, attempt: str, output_id: int, generation: int = 1,
           rows: dict[str, int] | None = None, extra: bool = False) -> list[tuple]:
    """Stage one attempt the way the job does (``data/event_date=D/part-*.parquet``, ``rejected/``, the
    manifest); the rows staged, as (offset, value, event_date)."""
    layout, rows = sink.layout, rows if rows is not None else {d: ROWS for d in DATES}
    written, data_files = [], []
    for date, n in rows.items():
        table = _rows(output_id, generation, date, n, extra)
        name = f"part-00000-{uuid.uuid4()}.c000.snappy.parquet"
        path = f"{layout.staging_data(batch_id, attempt)}/event_date={date}/{name}"
        os.makedirs(os.path.dirname(path), exist_ok=True)
        pq.write_table(table, path)
        data_files.append(path)
        written += [(o, v, date) for o, v in zip(table["offset"].to_pylist(), table["value"].to_pylist())]
    rejected = f"{layout.staging_rejected(batch_id, attempt)}/part-00000-{uuid.uuid4()}.c000.snappy.parquet"
    os.makedirs(os.path.dirname(rejected), exist_ok=True)
    pq.write_table(pa.table({"raw_value": pa.array([b"bad"] * 3), "error": pa.array(["x"] * 3)}), rejected)
    total = sum(rows.values())
    Manifest(pipeline="p", output_id=output_id, ranges=[RangeReport("t", 0, output_id * 10, output_id * 10 + total + 3,
                                                                    total, 3)],
             rows_in=total + 3, rows_out=total, rows_rejected=3, bytes_in=total * 40, data_files=data_files,
             rejected_files=[rejected], job_seconds=1.0, spark_version="4.3.0",
             attempt=attempt).save(layout.staging_manifest(batch_id, attempt))
    return written


def _age(paths: list[str], seconds: float) -> None:
    """Make files and folder trees look ``seconds`` old (mtime)."""
    when = time.time() - seconds
    for top in paths:
        for folder, _, names in os.walk(top):
            for name in names:
                os.utime(os.path.join(folder, name), (when, when))
            os.utime(folder, (when, when))
        if os.path.isfile(top):
            os.utime(top, (when, when))


def _publish_day(sink: FilesSink, ids: range, age: float = DAY, extra_at: int | None = None,
                 big_at: int | None = None) -> dict[int, list[tuple]]:
    """Publish batches ``ids`` (each its own output) and age them ``age`` seconds: a closed day."""
    expected = {}
    for b in ids:
        rows = {DATES[0]: 30 * ROWS, DATES[1]: ROWS} if b == big_at else None
        expected[b] = _stage(sink, b, f"a{b}", b, rows=rows, extra=b == extra_at)
        sink.publish(b, b, f"a{b}")
        _age([sink.layout.data(b), sink.rejected.of(b), sink.layout.manifest(b)], age)
    return expected


def _read(root: str) -> Counter:
    """Every row a reader of the table sees, as (offset, value, event_date), counted."""
    table = ds.dataset(root, format="parquet", partitioning="hive").to_table(columns=["offset", "value", "event_date"])
    return Counter(zip(table["offset"].to_pylist(), table["value"].to_pylist(),
                       [str(d) for d in table["event_date"].to_pylist()]))


def _expected(by_batch: dict[int, list[tuple]]) -> Counter:
    return Counter(row for rows in by_batch.values() for row in rows)


def _tree(root: str) -> dict[str, tuple]:
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            st = os.stat(os.path.join(folder, name))
            found[os.path.join(folder, name)] = (st.st_size, st.st_mtime_ns)
    return found


def _apply(sink: FilesSink, policy: MaintenanceSettings = POLICY) -> list[dict]:
    return [a.apply() for a in sink.maintenance(policy, _horizon(policy))]


def _manifests(sink: FilesSink) -> dict[int, dict]:
    return {i: asdict(m) for i, m in sink.published_manifests().items()}


@pytest.fixture()
def day(tmp_path):
    """20 small batches published yesterday (one with an extra column, one over the target size)."""
    sink = FilesSink.at(str(tmp_path / "table"), "events")
    expected = _publish_day(sink, range(1, 21), extra_at=9, big_at=5)
    return sink, expected


def _partition_files(sink: FilesSink) -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for date in DATES:
        found[date] = sorted(Path(sink.settings.path).glob(f"batch_id=*/event_date={date}/*.parquet"))
    return found


def test_compaction_joins_a_closed_day_and_every_row_reads_once(day):
    sink, expected = day
    before_manifests, before_ids = _manifests(sink), sink.published_ids()
    input_bytes = {d: sum(p.stat().st_size for p in fs) for d, fs in _partition_files(sink).items()}
    assert _read(sink.settings.path) == _expected(expected)

    tree = _tree(sink.settings.path)
    planned = sink.maintenance(POLICY, _horizon())
    assert [a.step for a in planned] == ["files.compact"]
    assert _tree(sink.settings.path) == tree  # listing the actions is a dry run
    done = planned[0].apply()
    assert done["batches"] == 20 and done["files_before"] == 40

    for date, files in _partition_files(sink).items():
        assert {f.parent.parent.name for f in files} == {"batch_id=1"}
        assert len(files) <= math.ceil(input_bytes[date] / POLICY.target_file_size), (date, files)
    assert _read(sink.settings.path) == _expected(expected)
    assert set(ds.dataset(sink.settings.path, format="parquet", partitioning="hive")
               .to_table(columns=["batch_id"])["batch_id"].to_pylist()) == {1}
    assert sink.published_ids() == before_ids and _manifests(sink) == before_manifests
    assert any("part-carried-5-" in f.name for f in _partition_files(sink)[DATES[0]])  # over the target: moved as is
    assert not os.path.exists(f"{sink.layout.meta}/trash") or not os.listdir(f"{sink.layout.meta}/trash")

    tree = _tree(sink.settings.path)
    assert sink.maintenance(POLICY, _horizon()) == []  # a second pass has nothing to do
    assert _tree(sink.settings.path) == tree


def test_today_and_too_few_small_files_are_not_compacted(tmp_path):
    sink = FilesSink.at(str(tmp_path / "table"), "events")
    _publish_day(sink, range(1, 6), age=0)  # today: the day is still open
    _publish_day(sink, range(6, 7), age=2 * DAY)  # one batch, two files: fewer than min_input_files
    assert sink.maintenance(POLICY, _horizon()) == []


@pytest.mark.parametrize("member", [1, 7], ids=["group-id", "middle"])
def test_a_replay_of_a_compacted_batch_replaces_exactly_its_rows(day, member):
    sink, expected = day
    _apply(sink)
    expected[member] = _stage(sink, 100, "r1", member, generation=2)
    sink.publish(100, member, "r1")
    assert _read(sink.settings.path) == _expected(expected)
    sink.publish(100, member, "r1")  # a roll-forward of the same publish changes nothing
    assert _read(sink.settings.path) == _expected(expected)
    assert sink.published_manifests()[member].attempt == "r1"
    if member != 1:
        assert groups.group_of(sink, member) is None and Path(sink.layout.data(member)).is_dir()
    expected[member] = _stage(sink, 101, "r2", member, generation=3)  # and once more
    sink.publish(101, member, "r2")
    assert _read(sink.settings.path) == _expected(expected)


@pytest.mark.parametrize("member", [1, 7, 20], ids=["group-id", "middle", "last"])
def test_retiring_a_compacted_batch_removes_exactly_its_rows(day, member):
    sink, expected = day
    _apply(sink)
    sink.retire(member)
    del expected[member]
    assert _read(sink.settings.path) == _expected(expected)
    assert member not in sink.published_ids()


def test_retiring_every_member_removes_the_group(day):
    sink, expected = day
    _apply(sink)
    for member in list(expected):
        sink.retire(member)
    assert not Path(sink.layout.data(1)).exists() and sink.published_ids() == []
    assert not os.path.exists(where.CompactionLayout(sink.layout.meta).group(1))


def test_retention_deletes_what_is_old_and_keeps_what_may_be_in_flight(tmp_path):
    sink = FilesSink.at(str(tmp_path / "table"), "events")
    layout = sink.layout
    _publish_day(sink, range(1, 3), age=10 * DAY)  # rejected records past the retention
    _publish_day(sink, range(3, 4), age=DAY)  # within it
    Path(layout.meta, "trash").mkdir(parents=True, exist_ok=True)

    def attempt(batch_id: int, name: str, age: float, output_id: int | None = None) -> str:
        _stage(sink, batch_id, name, batch_id if output_id is None else output_id, rows={DATES[0]: 5})
        _age([layout.attempt(batch_id, name)], age)
        return layout.attempt(batch_id, name)

    superseded_old = attempt(3, "loser", 2 * DAY)  # its batch published from a3: abandoned
    superseded_new = attempt(3, "young", 0.1 * DAY)  # maybe still writing
    planned = attempt(50, "a1", 2 * DAY)  # a planned batch: may run again, kept until the retention
    ancient = attempt(51, "a1", 10 * DAY)
    old_trash, new_trash = Path(layout.trash("old")), Path(layout.trash("new"))
    for t in (old_trash, new_trash):
        t.mkdir(parents=True)
        (t / "part-0.parquet").write_bytes(b"x")
    _age([str(old_trash)], 2 * DAY)

    policy = POLICY.model_copy(update={"min_input_files": 1000})  # retention only
    tree = _tree(sink.settings.path)
    planned_actions = sink.maintenance(policy, _horizon(policy))
    assert [a.step for a in planned_actions] == ["files.retention"]
    assert planned_actions[0].counts == {"attempts": 2, "trash": 1, "rejected_folders": 2, "rejected_rows": 6,
                                         "rejected_files": 2, "replaced_files": 0, "unnamed_folders": 0}
    assert _tree(sink.settings.path) == tree
    assert planned_actions[0].apply()["attempts"] == 2
    assert not Path(superseded_old).exists() and not Path(ancient).exists() and not old_trash.exists()
    assert Path(superseded_new).exists() and Path(planned).exists() and new_trash.exists()
    assert not Path(sink.rejected.of(1)).exists() and Path(sink.rejected.of(3)).exists()
    assert sink.published_ids() == [1, 2, 3]
    assert sink.maintenance(policy, _horizon(policy)) == []


# ---- SIGKILL at every step ---------------------------------------------------------------

def _killed(code: str, point: str) -> None:
    """Run ``code`` in a process of its own that is SIGKILLed at ``point``."""
    env = {**os.environ, "OFFSETBATCH_FAULTS": f"{point}:kill"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stderr[-3000:])


PASS = """
from datetime import datetime, timedelta, timezone
from offsetbatch.sinks.files import FilesSink
from offsetbatch.sinks.maintenance import Horizon, MaintenanceSettings, MiB
policy = MaintenanceSettings(target_file_size=MiB, min_input_files={min_input_files}, retain="7d", in_flight_grace="1d")
now = datetime.now(timezone.utc)
sink = FilesSink.at({root!r}, "events")
horizon = Horizon(now, now - timedelta(days=7), now - timedelta(days=1), now - timedelta(days=90))
for action in sink.maintenance(policy, horizon):
    action.apply()
"""


@pytest.mark.parametrize("point", [where.COMPACTION_STAGED, where.COMPACTION_SWAPPING])
def test_a_pass_killed_while_compacting_is_finished_by_the_next(day, point):
    sink, expected = day
    manifests = _manifests(sink)
    _killed(PASS.format(root=sink.settings.path, min_input_files=4), point)
    assert max(_read(sink.settings.path).values()) == 1  # never a row twice, even mid-swap
    _apply(sink)
    assert _read(sink.settings.path) == _expected(expected)
    assert {f.parent.parent.name for fs in _partition_files(sink).values() for f in fs} == {"batch_id=1"}
    assert _manifests(sink) == manifests
    assert sink.maintenance(POLICY, _horizon()) == []
    assert not os.listdir(where.CompactionLayout(sink.layout.meta).staged_base)


def test_a_pass_killed_while_compacting_is_finished_by_the_next_publish(day):
    sink, expected = day
    _killed(PASS.format(root=sink.settings.path, min_input_files=4), where.COMPACTION_SWAPPING)
    expected[7] = _stage(sink, 100, "r1", 7, generation=2)
    sink.publish(100, 7, "r1")
    assert _read(sink.settings.path) == _expected(expected)


def test_a_retention_pass_killed_is_finished_by_the_next(tmp_path):
    sink = FilesSink.at(str(tmp_path / "table"), "events")
    _publish_day(sink, range(1, 4), age=10 * DAY)
    _killed(PASS.format(root=sink.settings.path, min_input_files=1000), where.RETENTION_DELETING)
    assert len(os.listdir(sink.rejected.base)) == 2
    _apply(sink, POLICY.model_copy(update={"min_input_files": 1000}))
    assert os.listdir(sink.rejected.base) == []


REPLAY = """
from offsetbatch.sinks.files import FilesSink
FilesSink.at({root!r}, "events").{call}
"""


@pytest.mark.parametrize("point", [where.GROUP_SWAPPING, where.GROUP_LEFT])
@pytest.mark.parametrize("member", [1, 7], ids=["group-id", "middle"])
def test_a_replay_killed_while_leaving_its_group_is_rolled_forward(day, point, member):
    sink, expected = day
    _apply(sink)
    expected[member] = _stage(sink, 100, "r1", member, generation=2)
    _killed(REPLAY.format(root=sink.settings.path, call=f"publish(100, {member}, 'r1')"), point)
    assert max(_read(sink.settings.path).values()) == 1
    sink.publish(100, member, "r1")  # the commit's roll-forward
    assert _read(sink.settings.path) == _expected(expected)
    assert sink.published_manifests()[member].attempt == "r1"


@pytest.mark.parametrize("point", [where.GROUP_SWAPPING, where.GROUP_LEFT])
def test_a_retirement_killed_while_leaving_its_group_is_finished(day, point):
    sink, expected = day
    _apply(sink)
    _killed(REPLAY.format(root=sink.settings.path, call="retire(7)"), point)
    sink.retire(7)
    del expected[7]
    assert _read(sink.settings.path) == _expected(expected)


# ---- what it is for ------------------------------------------------------------------------

def test_a_compacted_day_scans_faster(tmp_path):
    """Not asserted (timings vary): printed for the record. A day of minute batches is 1440; 480
    here, each with two dates."""
    sink = FilesSink.at(str(tmp_path / "table"), "events")
    for b in range(1, 481):
        _stage(sink, b, f"a{b}", b, rows={d: 50 for d in DATES})
        sink.publish(b, b, f"a{b}")
        _age([sink.layout.data(b), sink.layout.manifest(b)], DAY)

    def scan() -> tuple[float, int]:
        best = math.inf
        for _ in range(3):
            start = time.perf_counter()
            rows = ds.dataset(sink.settings.path, format="parquet", partitioning="hive").to_table().num_rows
            best = min(best, time.perf_counter() - start)
        return best, rows

    files_before = len(list(Path(sink.settings.path).glob("batch_id=*/*/*.parquet")))
    before, rows = scan()
    _apply(sink)
    files_after = len(list(Path(sink.settings.path).glob("batch_id=*/*/*.parquet")))
    after, rows_after = scan()
    assert rows_after == rows
    print(f"\nscan of a day of 480 batches, {rows} rows: {files_before} files {before * 1000:.0f} ms, "
          f"compacted {files_after} files {after * 1000:.0f} ms ({before / after:.1f}x)")


# ---- Spark's own files ------------------------------------------------------------------------

def test_spark_staged_batches_compact_and_read_committed_still_reads_them(tmp_path, spark):
    """The job's writer (``Sink.stage``: Spark's part files, ``_SUCCESS``, checksums), compaction, a
    replay of a member, and ``read_committed`` through Spark: the same rows before and after."""
    from pyspark.sql import functions as F

    from offsetbatch.sinks.base import RejectedRows, TableSettings

    sink = FilesSink("events", TableSettings(path=str(tmp_path / "table"), event_time_column="ts"))
    rejected_schema = "raw_value binary, error string"

    def stage(batch_id: int, output_id: int, attempt: str, generation: int) -> None:
        frame = (spark.range(output_id * 1000, output_id * 1000 + 200).withColumnRenamed("id", "offset")
                 .withColumn("value", F.concat(F.lit(f"b{output_id}-g{generation}-"), F.col("offset").cast("string")))
                 .withColumn("ts", F.when(F.col("offset") % 2 == 0, F.lit("2026-11-25 10:00:00"))
                             .otherwise(F.lit("2026-11-26 10:00:00")).cast("timestamp")))
        rejected = RejectedRows(lambda: spark.createDataFrame([], rejected_schema), lambda: True)
        out = sink.stage(spark, frame, rejected, batch_id, attempt)
        Manifest(pipeline="events", output_id=output_id, ranges=[RangeReport("t", 0, 0, 200, 200, 0)], rows_in=200,
                 rows_out=out.rows_out, rows_rejected=0, bytes_in=0, data_files=out.data_files,
                 rejected_files=out.rejected_files, job_seconds=1.0, spark_version=spark.version,
                 attempt=attempt).save(sink.layout.staging_manifest(batch_id, attempt))

    for b in range(1, 7):
        stage(b, b, f"a{b}", 1)
        sink.publish(b, b, f"a{b}")
        _age([sink.layout.data(b), sink.layout.manifest(b)], DAY)

    def committed() -> list[tuple]:
        return sorted((r.offset, r.value, str(r.event_date)) for r in sink.read_committed(spark).collect())

    before = committed()
    assert len(before) == 1200
    assert [a.step for a in sink.maintenance(POLICY, _horizon())] == ["files.compact"]
    _apply(sink)
    assert committed() == before
    assert {r.batch_id for r in sink.read_committed(spark).select("batch_id").distinct().collect()} == {1}

    stage(100, 3, "r1", 2)  # a replay of a member, written by Spark
    sink.publish(100, 3, "r1")
    after = committed()
    others = [row for row in before if not row[1].startswith("b3-")]
    assert [row for row in after if not row[1].startswith("b3-")] == others
    assert sorted(row for row in after if row[1].startswith("b3-")) == \
        sorted((o, v.replace("-g1-", "-g2-"), d) for o, v, d in before if v.startswith("b3-"))
