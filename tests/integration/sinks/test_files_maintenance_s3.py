"""Issue 43, files sink on an object store: a closed day's small files compacted by a group
manifest (one PUT; nothing renamed), replays and retirements of compacted batches replacing
exactly their rows, the replaced files deleted only after the grace, and a SIGKILL at every step
finished by the next pass, publish or retire. S3Proxy serves the S3 REST API; attempts are staged
the way the job stages them there (``attempt=A/data/event_date=D/*.parquet``, the attempt's
manifest) and published through ``FilesSink.publish``. Rows are read back by a reader that is not
the sink's (pyarrow on the bucket, following the documented manifests: ``verify.object_store_rows``)
and once by the product's own ``read_committed`` in Spark (S3A, through Spark Connect)."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import uuid
from collections import Counter
from dataclasses import asdict
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.arrow import ArrowFSWrapper
from offsetbatch_dev import verify

from offsetbatch import storage
from offsetbatch.jobspec import Manifest, RangeReport
from offsetbatch.sinks.files import FilesSink
from offsetbatch.sinks.files import layout as where
from offsetbatch.sinks.maintenance import Horizon, MaintenanceSettings, MiB

pytestmark = pytest.mark.integration

DATES = ("2026-11-25", "2026-11-26")
POLICY = MaintenanceSettings(target_file_size=MiB, min_input_files=4, retain="7d", in_flight_grace="2d")
ROWS = 2500  # per batch and date: about 100 kB of Parquet, so a day's partition makes several target files


def _horizon(days_ahead: float) -> Horizon:
    """A pass ``days_ahead`` days from now: objects' times are the store's (now), so a pass a day
    ahead sees today's batches as a closed day (still within the 2-day grace), and one three days
    ahead is past the grace too."""
    now = datetime.now(timezone.utc) + timedelta(days=days_ahead)
    return Horizon(now, now - timedelta(seconds=POLICY.retain), now - timedelta(seconds=POLICY.in_flight_grace),
                   now - timedelta(days=90))


CLOSED, PAST_GRACE = 1.01, 3  # days ahead


@pytest.fixture
def lake(s3_server, request):
    """A bucket of the test's own, emptied, reached by the sink through the project's storage layer."""
    bucket = re.sub("[^a-z0-9]+", "-", f"fm-{request.node.name.lower()}")[:63].strip("-")
    fs = s3_server.filesystem()
    if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
        s3_server.create_bucket(bucket)
    fs.delete_dir_contents(bucket, missing_dir_ok=True)
    storage.register_s3(bucket, ArrowFSWrapper(fs))
    yield FilesSink.at(f"s3a://{bucket}/table", "events", "s3"), fs
    storage._s3_buckets.pop(bucket, None)


def _rows(output_id: int, generation: int, date: str, n: int) -> pa.Table:
    first = output_id * 1_000_000 + DATES.index(date) * 500_000
    offsets = list(range(first, first + n))
    return pa.table({"offset": pa.array(offsets, pa.int64()),
                     "value": pa.array([f"b{output_id}-g{generation}-{o}" for o in offsets]),
                     "payload": pa.array([os.urandom(24).hex() for _ in offsets])})


def _stage(sink: FilesSink, fs, batch_id: int, attempt: str, output_id: int, generation: int = 1,
           big: bool = False) -> list[tuple]:
    """Stage one attempt on the bucket as the job does; the rows staged, as (offset, value)."""
    folder = sink.layout.attempt(batch_id, attempt)
    written, data_files = [], []
    for date in DATES:
        table = _rows(output_id, generation, date, 30 * ROWS if big and date == DATES[0] else ROWS)
        uri = f"{folder}/data/event_date={date}/part-00000-{uuid.uuid4()}.c000.snappy.parquet"
        pq.write_table(table, uri.partition("://")[2], filesystem=fs)
        data_files.append(uri)
        written += list(zip(table["offset"].to_pylist(), table["value"].to_pylist()))
    rejected = f"{folder}/rejected/part-00000-{uuid.uuid4()}.c000.snappy.parquet"
    pq.write_table(pa.table({"raw_value": pa.array([b"bad"] * 3), "error": pa.array(["x"] * 3)}),
                   rejected.partition("://")[2], filesystem=fs)
    total = len(written)
    Manifest(pipeline="p", output_id=output_id, ranges=[RangeReport("t", 0, output_id * 10, output_id * 10 + total + 3,
                                                                    total, 3)],
             rows_in=total + 3, rows_out=total, rows_rejected=3, bytes_in=total * 40, data_files=data_files,
             rejected_files=[rejected], job_seconds=1.0, spark_version="4.3.0",
             attempt=attempt).save(sink.layout.staging_manifest(batch_id, attempt))
    return written


@pytest.fixture
def day(lake):
    """12 small batches published today (one over the target size), seen as a closed day by a pass
    run a day ahead."""
    sink, fs = lake
    expected = {}
    for b in range(1, 13):
        expected[b] = _stage(sink, fs, b, f"a{b}", b, big=b == 5)
        sink.publish(b, b, f"a{b}")
    return sink, fs, expected


def _read(sink: FilesSink, fs) -> Counter:
    """Every row a reader of the bucket sees, as (offset, value), counted."""
    return Counter(r for rows in verify.object_store_rows(fs, sink.settings.path, ["offset", "value"]).values()
                   for r in rows)


def _expected(by_batch: dict[int, list[tuple]]) -> Counter:
    return Counter(row for rows in by_batch.values() for row in rows)


def _objects(sink: FilesSink, fs) -> dict[str, int]:
    root = sink.settings.path.partition("://")[2]
    return {i.path: i.size for i in fs.get_file_info(pafs.FileSelector(root, recursive=True))
            if i.type == pafs.FileType.File}


def _apply(sink: FilesSink, days_ahead: float = CLOSED) -> list[dict]:
    return [a.apply() for a in sink.maintenance(POLICY, _horizon(days_ahead))]


def _group(sink: FilesSink, group: int = 1) -> dict:
    return storage.read_json(where.CompactionLayout(sink.layout.meta).group(group))


def test_compaction_on_s3_is_one_manifest_put_and_every_row_reads_once(day):
    sink, fs, expected = day
    before_manifests = {i: asdict(m) for i, m in sink.published_manifests().items()}
    big = f"/attempt=a5/data/event_date={DATES[0]}/"
    small_bytes = {d: sum(size for path, size in _objects(sink, fs).items() if f"/event_date={d}/" in path
                          and big not in path) for d in DATES}
    assert _read(sink, fs) == _expected(expected)
    assert sink.maintenance(POLICY, _horizon(0)) == []  # today's batches: the day is still open

    objects = _objects(sink, fs)
    planned = sink.maintenance(POLICY, _horizon(CLOSED))
    assert [a.step for a in planned] == ["files.compact"]
    assert _objects(sink, fs) == objects  # listing the actions is a dry run
    done = planned[0].apply()
    assert done["batches"] == 12 and done["files_before"] == 24

    group = _group(sink)
    assert group["members"] == list(range(1, 13)) and group["in_place"]
    per_partition = Counter(key.rsplit("/", 2)[-2] for key in group["files"])
    for d in DATES:
        carried = 1 if d == DATES[0] else 0  # batch 5's file over the target stays where its attempt wrote it
        assert per_partition[f"event_date={d}"] <= math.ceil(small_bytes[d] / POLICY.target_file_size) + carried
    assert any("/attempt=a5/data/" in key for key in group["files"])
    assert _read(sink, fs) == _expected(expected)
    assert {i: asdict(m) for i, m in sink.published_manifests().items()} == before_manifests
    assert set(objects) <= set(_objects(sink, fs))  # nothing deleted yet: a reader may still read the old files

    assert sink.maintenance(POLICY, _horizon(CLOSED)) == []  # within the grace: nothing more to do
    [retention] = sink.maintenance(POLICY, _horizon(PAST_GRACE))
    assert retention.step == "files.retention" and retention.counts["replaced_files"] == 23
    retention.apply()
    left = _objects(sink, fs)
    assert not [p for p in left if "/data/" in p and "/attempt=" in p and "/attempt=a5/" not in p]
    assert _read(sink, fs) == _expected(expected)
    assert sink.maintenance(POLICY, _horizon(PAST_GRACE)) == []


def test_read_committed_reads_a_compacted_day_on_s3_through_spark(day, s3_server, spark_connect_server):
    """The product's reader, in Spark (S3A): a group's files read as ``batch_id = 1`` with their
    ``event_date`` from the folder names, every other batch from its own manifest."""
    sink, fs, expected = day
    _apply(sink)
    extra = _stage(sink, fs, 13, "a13", 13)  # published after the compaction: read from its own manifest
    sink.publish(13, 13, "a13")
    code = _child(sink) + f"""
import json
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote({spark_connect_server.url!r}).create()
for key, value in settings.hadoop_options().items():
    spark.conf.set(key, value)
rows = sink.read_committed(spark)
got = [(r.offset, r.value, r.batch_id, str(r.event_date)) for r in rows.select("offset", "value", "batch_id", "event_date").collect()]
print(json.dumps(got))
"""
    done = subprocess.run([sys.executable, "-c", code], env=_child_env(s3_server), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert Counter((o, v) for o, v, _, _ in got) == _expected({**expected, 13: extra})
    assert {b for _, _, b, _ in got} == {1, 13}
    assert {d for _, _, _, d in got} == set(DATES)


@pytest.mark.parametrize("member", [1, 7], ids=["group-id", "middle"])
def test_a_replay_of_a_compacted_batch_on_s3_replaces_exactly_its_rows(day, member):
    sink, fs, expected = day
    _apply(sink)
    expected[member] = _stage(sink, fs, 100, "r1", member, generation=2)
    sink.publish(100, member, "r1")
    assert _read(sink, fs) == _expected(expected)
    group = _group(sink)
    sink.publish(100, member, "r1")  # a roll-forward of the same publish changes nothing
    assert _group(sink) == group and _read(sink, fs) == _expected(expected)
    assert sink.published_manifests()[member].attempt == "r1" and group["attempts"][str(member)] == "r1"
    expected[member] = _stage(sink, fs, 101, "r2", member, generation=3)  # and once more
    sink.publish(101, member, "r2")
    assert _read(sink, fs) == _expected(expected)
    _apply(sink, PAST_GRACE)  # the replaced files go; what the group names stays
    assert _read(sink, fs) == _expected(expected)


@pytest.mark.parametrize("member", [1, 7, 12], ids=["group-id", "middle", "last"])
def test_retiring_a_compacted_batch_on_s3_removes_exactly_its_rows(day, member):
    sink, fs, expected = day
    _apply(sink)
    sink.retire(member)
    del expected[member]
    assert _read(sink, fs) == _expected(expected)
    assert member not in sink.published_ids() and member not in _group(sink)["members"]


def test_retiring_every_member_on_s3_removes_the_group_and_its_files(day):
    sink, fs, expected = day
    _apply(sink)
    for member in list(expected):
        sink.retire(member)
    assert sink.published_ids() == [] and _read(sink, fs) == Counter()
    assert not storage.exists(where.CompactionLayout(sink.layout.meta).group(1))
    _apply(sink, PAST_GRACE)
    assert not [p for p in _objects(sink, fs) if p.endswith(".parquet")]


# ---- SIGKILL at every step ---------------------------------------------------------------

def _child(sink: FilesSink) -> str:
    """The opening of a child process's code: the sink, its bucket reached with the server's
    connection, which comes in the environment (``_child_env``), never on the command line."""
    return f"""
import json, os
from offsetbatch import storage
from offsetbatch.sinks.files import FilesSink
from offsetbatch.storage.s3 import S3Settings
conn = json.loads(os.environ["OFFSETBATCH_TEST_S3_CONN"])
settings = S3Settings.from_fields("s3", conn["login"], conn["password"], conn["extra"])
storage.register_s3({sink.settings.path.split('/')[2]!r}, settings.filesystem())
sink = FilesSink.at({sink.settings.path!r}, "events", "s3")
"""


def _child_env(s3_server) -> dict[str, str]:
    return {**os.environ, "OFFSETBATCH_TEST_S3_CONN": json.dumps(s3_server.connection())}


def _killed(sink: FilesSink, s3_server, call: str, point: str, days_ahead: float = CLOSED,
            min_input_files: int = 4) -> None:
    """Run ``call`` on the sink in a process of its own that is SIGKILLed at ``point``."""
    code = _child(sink) + f"""
from datetime import datetime, timedelta, timezone
from offsetbatch.sinks.maintenance import Horizon, MaintenanceSettings, MiB
policy = MaintenanceSettings(target_file_size=MiB, min_input_files={min_input_files}, retain="7d", in_flight_grace="2d")
now = datetime.now(timezone.utc) + timedelta(days={days_ahead})
horizon = Horizon(now, now - timedelta(days=7), now - timedelta(days=2), now - timedelta(days=90))
{call}
"""
    env = {**_child_env(s3_server), "OFFSETBATCH_FAULTS": f"{point}:kill"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stderr[-3000:])


PASS = "for action in sink.maintenance(policy, horizon):\n    action.apply()"


@pytest.mark.parametrize("point", [where.COMPACTION_STAGED, where.COMPACTION_SWAPPING])
def test_a_pass_on_s3_killed_while_compacting_is_finished_by_the_next(day, s3_server, point):
    sink, fs, expected = day
    manifests = {i: asdict(m) for i, m in sink.published_manifests().items()}
    _killed(sink, s3_server, PASS, point)
    assert _read(sink, fs) == _expected(expected)  # every row once, before the swap and after
    _apply(sink)
    assert _read(sink, fs) == _expected(expected)
    assert _group(sink)["members"] == list(range(1, 13))
    assert {i: asdict(m) for i, m in sink.published_manifests().items()} == manifests
    assert [a.step for a in sink.maintenance(POLICY, _horizon(CLOSED))] == []
    _apply(sink, PAST_GRACE)  # the killed pass's unnamed files and the replaced ones go
    named = {f"{sink.settings.path.partition('://')[2]}/{k}" for k in _group(sink)["files"]}
    compacted = {p for p in _objects(sink, fs) if "/compactions/files/" in p}
    assert compacted and compacted <= named
    assert _read(sink, fs) == _expected(expected)


@pytest.mark.parametrize("point", [where.GROUP_SWAPPING, where.GROUP_LEFT])
@pytest.mark.parametrize("member", [1, 7], ids=["group-id", "middle"])
def test_a_replay_on_s3_killed_while_swapping_its_group_is_rolled_forward(day, s3_server, point, member):
    sink, fs, expected = day
    _apply(sink)
    staged = _stage(sink, fs, 100, "r1", member, generation=2)
    _killed(sink, s3_server, f"sink.publish(100, {member}, 'r1')", point)
    assert max(_read(sink, fs).values()) == 1  # never a row twice
    sink.publish(100, member, "r1")  # the commit's roll-forward
    expected[member] = staged
    assert _read(sink, fs) == _expected(expected)
    assert sink.published_manifests()[member].attempt == "r1"


@pytest.mark.parametrize("point", [where.GROUP_SWAPPING, where.GROUP_LEFT])
def test_a_retirement_on_s3_killed_while_swapping_its_group_is_finished(day, s3_server, point):
    sink, fs, expected = day
    _apply(sink)
    _killed(sink, s3_server, "sink.retire(7)", point)
    del expected[7]
    assert _read(sink, fs) == _expected(expected)  # its manifest went first: never read from its own files
    sink.retire(7)
    assert _read(sink, fs) == _expected(expected) and 7 not in _group(sink)["members"]


def test_rejected_records_on_s3_past_the_retention_go_even_from_a_killed_pass(day, s3_server):
    """Rejected records stay in their attempt folder on an object store, named by the manifest: past
    ``retain`` they are taken out of it and deleted; a pass killed after the first batch's leaves
    every manifest naming only files that exist, and the next pass deletes the rest."""
    sink, fs, expected = day
    policy = POLICY.model_copy(update={"min_input_files": 1000})  # retention only
    ranges = {i: m.ranges for i, m in sink.published_manifests().items()}
    assert sink.maintenance(policy, _horizon(CLOSED)) == []  # within the retention
    [planned] = sink.maintenance(policy, _horizon(8))
    assert planned.counts["rejected_folders"] == 12 and planned.counts["rejected_rows"] == 36

    _killed(sink, s3_server, PASS, where.RETENTION_DELETING, days_ahead=8, min_input_files=1000)
    rejected = verify.object_store_rows(fs, sink.settings.path, ["raw_value"], "rejected")  # no file named is gone
    assert 0 < sum(map(len, rejected.values())) < 36
    [rest] = sink.maintenance(policy, _horizon(8))
    rest.apply()
    assert not [p for p in _objects(sink, fs) if "/rejected/" in p]
    assert all(not m.rejected_files and not m.rejected_expired for m in sink.published_manifests().values())
    assert {i: m.ranges for i, m in sink.published_manifests().items()} == ranges
    assert _read(sink, fs) == _expected(expected)
    assert sink.maintenance(policy, _horizon(8)) == []
