"""The files and Iceberg sinks on an S3 API (issue 27): S3Proxy serves the S3 REST API; Spark writes
through Hadoop's S3A (magic committer), the commit side through pyarrow's S3 filesystem and
pyiceberg, all configured from one Airflow ``aws`` connection. A crash at each boundary, then a
rerun: every record exactly once, read back by readers that are not the sinks' (pyarrow listing
the bucket and reading the manifests and the Parquet files they name; pyiceberg's scan), and no
Parquet object left that no manifest or snapshot names. Nothing is renamed at commit time on an
object store. Also: a replay, a ledger rebuilt from the bucket, and ``doctor``'s bucket check.

Where the claim is the commit protocol on a bucket, the runs' Spark jobs are clients of the suite's
Spark Connect server (S3A on its classpath, the bucket's settings per session: the product's
Connect path); one test runs ``spark-submit`` with S3A, for what only a job of its own shows: its
driver killed mid-upload, the secret kept off its command line, the magic committer's report."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from offsetbatch_dev import verify

from offsetbatch.errors import StorageConnectionError
from offsetbatch.ledger import Ledger
from offsetbatch.storage.s3 import S3Settings, check_bucket

pytestmark = pytest.mark.integration
BASE = datetime(2026, 11, 3, tzinfo=timezone.utc)
H = timedelta(hours=1)
CONN_ID = "s3_test"


@pytest.fixture
def s3_pipeline(make_pipeline, s3_server, request, monkeypatch):
    """``make_pipeline`` with the table in a bucket of the test's own (``s3a://<test>/table``, emptied first)
    and the server's ``aws`` connection defined for its runs and for this process."""
    conn = json.dumps(s3_server.connection())
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", conn)

    def make():
        table = f"s3a://{_bucket(s3_server, request)}/table"
        p = make_pipeline(sink={"path": table, "storage_conn_id": CONN_ID})
        p.env = {**p.env, f"AIRFLOW_CONN_{CONN_ID.upper()}": conn}
        p.table = table
        return p
    return make


def _bucket(server, request) -> str:
    """A bucket of the test's own (S3 names: lowercase letters, digits, '-', at most 63), emptied."""
    import re

    name = re.sub("[^a-z0-9]+", "-", request.node.name.lower())[:63].strip("-")
    fs = server.filesystem()
    if fs.get_file_info(name).type == pafs.FileType.NotFound:
        server.create_bucket(name)
    fs.delete_dir_contents(name, missing_dir_ok=True)
    return name


def _objects(fs, table: str) -> list[str]:
    root = table.partition("://")[2]
    return sorted(i.path for i in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
                  if i.type == pafs.FileType.File)


def _check(p, fs) -> verify.Report:
    return verify.check_object_store(fs, p.table, p.expected_ids(set()), p.malformed(set()), p.ledger, p.name)


def _manifests(fs, table: str) -> list[dict]:
    root = table.partition("://")[2]
    out = []
    for info in fs.get_file_info(pafs.FileSelector(f"{root}/_offsetbatch/manifests", allow_not_found=True)):
        with fs.open_input_stream(info.path) as f:
            out.append(json.loads(f.read()))
    return out


def _unreferenced(p, fs) -> list[str]:
    """Parquet objects that no published manifest names (orphans)."""
    named = {u.partition("://")[2] for m in _manifests(fs, p.table) for u in m["data_files"] + m["rejected_files"]}
    return [o for o in _objects(fs, p.table) if o.endswith(".parquet") and o not in named]


def test_a_spark_submit_job_on_s3_killed_mid_write_publishes_nothing_and_leaks_no_secret(s3_pipeline, s3_server):
    """``spark-submit`` with S3A: its driver killed while the magic committer's uploads are open
    publishes nothing of the batch, and the rerun writes it once; every file went up once, to its
    final name (the committer's ``_SUCCESS`` is its JSON report); the store's secret reached Spark in
    the private secrets file only, never a task log (the spark-submit command line included) nor a
    job spec or manifest on the bucket."""
    fs = s3_server.filesystem()
    p = s3_pipeline()
    p.produce(600, start=BASE, hours=2)

    first = p.run(BASE)
    assert first.ok, first.output[-4000:]
    assert "Spark-Submit cmd" in first.output
    assert not [o for o in _objects(fs, p.table) if "/_offsetbatch/" not in o], \
        "nothing outside _offsetbatch/: on an object store the data is published in place"
    _killed_mid_write_then_rerun(p, fs, "driver")

    report = _check(p, fs)
    assert report.ok, report.summary()
    assert report.output == len(p.expected_ids(set()))
    assert not _unreferenced(p, fs), "every Parquet object is named by a published manifest"
    _assert_magic_committer(fs, p)
    secret = s3_server.connection()["password"]
    assert not [log.name for log in (p.root / "runs").glob("*.log") if secret in log.read_text()]
    for obj in _objects(fs, p.table):
        if obj.endswith(".json"):
            with fs.open_input_stream(obj) as f:
                assert secret.encode() not in f.read(), obj


def _killed_mid_write_then_rerun(p, fs, who: str) -> None:
    """Batch 2's job killed while it writes (``who``: the Spark driver, or the Connect client):
    nothing of it published, the batch stays planned, and the rerun of the same run finishes it."""
    crashed = p.run(BASE + H, faults="job.kill_during_write")
    crashed.assert_failed_with(f"killing the Spark {who} mid-write")
    assert p.ledger.get_batch(p.name, 2).status == "planned"
    assert set(verify.object_store_rows(fs, p.table, ["event_id"])) == {1}
    rerun = p.run(BASE + H, run_after=crashed.run_after)
    assert rerun.ok, rerun.output[-4000:]


def _assert_magic_committer(fs, p) -> None:
    """Spark wrote through S3A's magic committer (its _SUCCESS is a JSON report): each file uploaded
    once to its final name, no rename (a copy on S3) in the job either."""
    for manifest in _manifests(fs, p.table):
        with fs.open_input_stream(f"{manifest['location'].partition('://')[2]}/data/_SUCCESS") as f:
            assert json.loads(f.read())["committer"] == "magic"


@pytest.mark.spark_connect
def test_files_sink_on_s3_exactly_once_through_crashes_a_replay_and_a_lost_ledger(s3_pipeline, s3_server,
                                                                                 spark_connect_server):
    """One pipeline through three crashes, then a replay and a lost ledger, its jobs on the Spark
    Connect server (the bucket's S3A settings per session)."""
    fs = s3_server.filesystem()
    p = s3_pipeline()
    p.produce(1200, start=BASE, hours=4)

    first = p.run(BASE)
    assert first.ok, first.output[-4000:]
    assert "Spark-Submit cmd" not in first.output

    # 1. The Spark client (the spark_job task) killed mid-write: nothing of batch 2 published, the
    # rerun writes it once.
    _killed_mid_write_then_rerun(p, fs, "client (the spark_job task)")

    # 2. The commit task dies after the ledger transaction: committed, not published; rolled forward.
    crashed = p.run(BASE + 2 * H, faults="commit.after_transaction:kill")
    assert not crashed.ok
    assert p.ledger.get_batch(p.name, 3).stats["published_at"] is None
    assert set(verify.object_store_rows(fs, p.table, ["event_id"])) == {1, 2}
    rerun = p.run(BASE + 2 * H, run_after=crashed.run_after)
    assert rerun.ok, rerun.output[-4000:]
    assert "was committed but not published; published it now" in rerun.output

    # 3. The commit task killed inside publication, after the manifest's PUT: the batch is visible
    # (the manifest is the publication), the rerun only finishes the ledger's mark and the cleanup.
    crashed = p.run(BASE + 3 * H, faults="commit.manifest_published:kill")
    assert not crashed.ok
    assert set(verify.object_store_rows(fs, p.table, ["event_id"])) == {1, 2, 3, 4}
    assert p.ledger.get_batch(p.name, 4).stats["published_at"] is None
    rerun = p.run(BASE + 3 * H, run_after=crashed.run_after)
    assert rerun.ok, rerun.output[-4000:]

    report = _check(p, fs)
    assert report.ok, report.summary()
    assert report.output == len(p.expected_ids(set()))
    assert not _unreferenced(p, fs), "every Parquet object is named by a published manifest"
    assert not [o for o in _objects(fs, p.table) if "/_offsetbatch/trash/" in o]
    _assert_magic_committer(fs, p)  # set per session on Connect
    # On Connect the secret stays in the task's memory: the session's settings, which Spark redacts.
    secret = s3_server.connection()["password"]
    assert not [log.name for log in (p.root / "runs").glob("*.log") if secret in log.read_text()]

    # 4. A replay of batch 1 swaps its manifest and deletes its old files; the other batches stay.
    before = verify.object_store_rows(fs, p.table, ["event_id"])
    old_files = set(_objects(fs, p.table))
    replay = p.run(None, conf={"mode": "replay", "batch_ids": "1", "reason": "test replay on S3"})
    assert replay.ok, replay.output[-4000:]
    after = verify.object_store_rows(fs, p.table, ["event_id"])
    assert {k: sorted(v) for k, v in after.items()} == {k: sorted(v) for k, v in before.items()}
    assert not _unreferenced(p, fs)
    gone = old_files - set(_objects(fs, p.table))
    assert any("/_offsetbatch/attempts/batch_id=1/" in o and o.endswith(".parquet") for o in gone), "batch 1's old files deleted"
    report = _check(p, fs)
    assert report.ok, report.summary()

    # 5. The ledger lost: rebuilt from the manifests on the bucket; the next run goes on exactly once.
    frontier = p.ledger.frontier_now(p.name)
    ledger_file = Path(p.ledger_url.removeprefix("sqlite:///"))
    p.ledger.dispose()
    for f in ledger_file.parent.glob(ledger_file.name + "*"):
        f.unlink()
    rebuilt = subprocess.run(["offsetbatch", "--pipelines", str(p.root), "ledger", "rebuild", p.name, "--apply"],
                             env=p.env, capture_output=True, text=True, timeout=120)
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    p.ledger = Ledger(p.ledger_url)
    assert p.ledger.frontier_now(p.name) == frontier
    p.produce(300, start=BASE + 4 * H, hours=1)
    resumed = p.run(BASE + 4 * H)
    assert resumed.ok, resumed.output[-4000:]
    report = _check(p, fs)
    assert report.ok, report.summary()


@pytest.mark.spark_connect
def test_two_runs_executing_one_batch_at_once_leave_nothing_of_the_loser(s3_pipeline, s3_server, spark_connect_server):
    """Two runs execute batch 1 at the same time (the second finds it planned and runs it too): one
    commits, the other loses, either failing mid-write because the winner's publish removed its
    folder, or finishing and finding the batch committed, or (when the winner commits while the
    loser still plans) finding it committed before its job starts. Whichever way the loser ends,
    nothing of it stays on the bucket (issue 41, case 3: its ``_error.json`` and the objects it
    wrote after the winner's cleanup used to stay for good): every object is a published manifest,
    a Parquet file a manifest names, or the table's own metadata, and every record is there once."""
    from concurrent.futures import ThreadPoolExecutor

    fs = s3_server.filesystem()
    p = s3_pipeline()
    p.produce(3000, start=BASE, hours=1)
    p.register()  # two `dags test` processes would otherwise race to insert the new DAG's Asset row
    at = [BASE, BASE + H]  # two Airflow runs (a date each); the later one finds batch 1 planned
    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(lambda logical: p.run(logical, run_after=logical + 100 * H, own_process=True), at))
    assert all(o.ok for o in outcomes), [o.output[-3000:] for o in outcomes if not o.ok]
    logs = "".join(o.output for o in outcomes)
    assert "batch 1: planned by run" in logs and "executes it first" in logs, logs[-4000:]  # both took it up
    assert ("committed by other attempts" in logs or "already committed (attempt" in logs  # one lost
            or "nothing left to run: batch 1 is already committed" in logs), logs[-4000:]
    assert _unreferenced(p, fs) == []
    # On S3 the winner's files stay in its attempt folder (the manifest's location): any other
    # attempt's object, or an error file, is the loser's litter.
    published = [m["location"].partition("://")[2].rstrip("/") + "/" for m in _manifests(fs, p.table)]
    objects = _objects(fs, p.table)
    litter = [o for o in objects if ("/attempts/" in o and not any(o.startswith(w) for w in published))
              or o.endswith("_error.json")]
    assert litter == [], (published, objects)
    report = _check(p, fs)
    assert report.ok, report.summary()


def test_an_attempt_folder_another_process_deletes_first_is_no_error(s3_server, request, monkeypatch):
    """Both runs of the test above delete the loser's attempt folder: the winner's publish and the
    loser's own discard. CI (stop 46) failed the winner's publish, after its commit, on S3's "Path
    does not exist" when the loser's delete landed between the winner's check and its delete. Here a
    rival deletes the folder after each check, every time: removing it and reading its staged
    manifest both take "gone" for an answer."""
    from fsspec.implementations.arrow import ArrowFSWrapper

    from offsetbatch import storage
    from offsetbatch.jobspec import Manifest

    name = _bucket(s3_server, request)
    conn = s3_server.connection()
    settings = S3Settings.from_fields(CONN_ID, conn["login"], conn["password"], conn["extra"])
    rival, folder = s3_server.filesystem(), f"s3a://{name}/attempts/batch_id=1/attempt=loser"

    class RivalDeletesAfterEachCheck(ArrowFSWrapper):
        def exists(self, path, **kwargs) -> bool:
            found = super().exists(path, **kwargs)
            if rival.get_file_info(folder.partition("://")[2]).type != pafs.FileType.NotFound:
                rival.delete_dir(folder.partition("://")[2])
            return found

    monkeypatch.setitem(storage._s3_buckets, name, RivalDeletesAfterEachCheck(settings.filesystem().fs))
    storage.write_json(f"{folder}/_manifest.json", {"attempt": "loser"})
    storage.write_json(f"{folder}/data/part-00000.json", {})
    assert storage.remove(folder) is True
    assert rival.get_file_info(folder.partition("://")[2]).type == pafs.FileType.NotFound
    storage.write_json(f"{folder}/_manifest.json", {"attempt": "loser"})
    assert Manifest.load_if_exists(f"{folder}/_manifest.json") is None


def test_bucket_check_names_each_cause(s3_server):
    """``doctor``'s check: each cause its own error, naming the connection."""
    conn = s3_server.connection()
    good = S3Settings.from_fields("s3_test", conn["login"], conn["password"], conn["extra"])
    check_bucket(good, "s3a://tables/doctor")

    wrong_key = S3Settings.from_fields("s3_test", conn["login"], "not-the-secret", conn["extra"])
    with pytest.raises(StorageConnectionError, match="refused the credentials"):
        check_bucket(wrong_key, "s3a://tables/doctor-wrong-key")
    with pytest.raises(StorageConnectionError, match="bucket 'no-such-bucket' does not exist"):
        check_bucket(good, "s3a://no-such-bucket/doctor")


def test_bucket_check_says_when_the_endpoint_is_down(s3_server):
    """A closed port: StorageUnreachableError (the one cause a retry may fix), naming the endpoint."""
    from offsetbatch.errors import StorageUnreachableError

    conn = s3_server.connection()
    down = S3Settings.from_fields("s3_test", conn["login"], conn["password"],
                                  {**conn["extra"], "endpoint_url": "http://127.0.0.1:9"})
    with pytest.raises(StorageUnreachableError, match=r"endpoint http://127.0.0.1:9\): the endpoint did not answer"):
        check_bucket(down, "s3a://tables/doctor-down")


def test_bucket_check_says_when_https_meets_a_plain_http_endpoint(s3_server):
    """``https://`` to the store's plain HTTP port used to be "the endpoint did not answer", retried
    (issue 41, case 15): the handshake failed, which no retry fixes."""
    conn = s3_server.connection()
    extra = {**conn["extra"], "endpoint_url": conn["extra"]["endpoint_url"].replace("http://", "https://")}
    tls = S3Settings.from_fields("s3_test", conn["login"], conn["password"], extra)
    with pytest.raises(StorageConnectionError, match=r"the TLS handshake with the endpoint failed .*https:// only if "
                                                     r"the store serves TLS") as info:
        check_bucket(tls, "s3a://tables/doctor-tls")
    from offsetbatch.dag.retry_policy import is_permanent

    assert is_permanent(info.value)


@pytest.mark.spark_connect
def test_iceberg_sink_on_s3_exactly_once_through_crashes(make_pipeline, s3_server, request, monkeypatch,
                                                         spark_connect_server):
    """The iceberg sink with its warehouse and staging on the bucket: the snapshot adds the files
    where the job wrote them. Killed inside the Iceberg commit (metadata written, catalog not yet
    swapped), the Spark client killed mid-write (its jobs on the Connect server), the commit task
    killed after the ledger transaction, then a replay; read back with pyiceberg's own scan (its S3
    FileIO), every record once, and every Parquet object on the bucket named by a snapshot."""
    fs = s3_server.filesystem()
    conn = s3_server.connection()
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(conn))
    root = f"s3a://{_bucket(s3_server, request)}"
    p = make_pipeline(sink={"type": "iceberg", "namespace": "lake", "table": "events", "path": f"{root}/staging",
                            "warehouse": f"{root}/warehouse", "partition_by": ["day(event_time)"],
                            "event_time_column": None, "storage_conn_id": CONN_ID})
    p.env = {**p.env, f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps(conn)}
    catalog = f"sqlite:///{p.root}/ledger.iceberg.db"
    props = S3Settings.from_fields(CONN_ID, conn["login"], conn["password"], conn["extra"]).pyiceberg_properties()
    p.produce(1200, start=BASE, hours=4)

    assert p.run(BASE).ok
    crashed = p.run(BASE + H, faults="commit.iceberg_metadata_written:kill")
    assert not crashed.ok
    assert p.ledger.get_batch(p.name, 2).stats["published_at"] is None
    rerun = p.run(BASE + H, run_after=crashed.run_after)
    assert rerun.ok, rerun.output[-4000:]

    crashed = p.run(BASE + 2 * H, faults="job.kill_during_write")
    crashed.assert_failed_with("killing the Spark client (the spark_job task) mid-write")
    rerun = p.run(BASE + 2 * H, run_after=crashed.run_after)
    assert rerun.ok, rerun.output[-4000:]

    crashed = p.run(BASE + 3 * H, faults="commit.after_transaction:kill")
    assert not crashed.ok and p.ledger.get_batch(p.name, 4).stats["published_at"] is None
    rerun = p.run(BASE + 3 * H, run_after=crashed.run_after)
    assert rerun.ok, rerun.output[-4000:]
    assert "was committed but not published; published it now" in rerun.output

    replay = p.run(None, conf={"mode": "replay", "batch_ids": "2", "reason": "test replay on S3"})
    assert replay.ok, replay.output[-4000:]

    report = verify.check_iceberg(catalog, "lake.events", p.expected_ids(set()), p.malformed(set()), p.ledger,
                                  p.name, **props)
    assert report.ok, report.summary()
    assert report.output == len(p.expected_ids(set()))
    named = set()
    for ident in ("lake.events", "lake.events_rejected"):
        table = verify.iceberg_table(catalog, ident, **props)
        for snap in table.snapshots():
            named |= {t.file.file_path.partition("://")[2] for t in table.scan(snapshot_id=snap.snapshot_id).plan_files()}
        assert all(t.file.file_path.startswith("s3://") for t in table.scan().plan_files())
    parquet = [o for o in _objects(fs, root) if o.endswith(".parquet")]
    assert parquet and not [o for o in parquet if o not in named], "every Parquet object is a snapshot's file"


def test_delta_sink_on_s3_exactly_once_through_crashes(make_pipeline, s3_server, request, monkeypatch,
                                                       spark_connect_server):
    """The delta sink with its table and staging on the bucket: delta-rs writes the rows into the
    table and commits each batch's log entry with a conditional PUT. Killed after the rows' commit
    (the rejected records' not yet made), the commit task killed after the ledger transaction, then
    a replay; read back with Polars' Delta reader over S3 (its own object-store client), every
    record once."""
    from offsetbatch.sinks.delta.table import storage_options

    conn = s3_server.connection()
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(conn))
    root = f"s3a://{_bucket(s3_server, request)}"
    p = make_pipeline(sink={"type": "delta", "table": f"{root}/delta/events", "path": f"{root}/staging",
                            "event_time_column": None, "storage_conn_id": CONN_ID})
    p.env = {**p.env, f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps(conn)}
    options = storage_options(p.cfg.sink)
    table = f"s3://{root.partition('://')[2]}/delta/events"
    p.produce(1200, start=BASE, hours=3)

    assert p.run(BASE).ok
    crashed = p.run(BASE + H, faults="commit.after_delta_commit:kill")
    assert not crashed.ok and p.ledger.get_batch(p.name, 2).stats["published_at"] is None
    rerun = p.run(BASE + H, run_after=crashed.run_after)
    assert rerun.ok, rerun.output[-4000:]
    assert "already holds this batch" in rerun.output

    crashed = p.run(BASE + 2 * H, faults="commit.after_transaction:kill")
    assert not crashed.ok and p.ledger.get_batch(p.name, 3).stats["published_at"] is None
    rerun = p.run(BASE + 2 * H, run_after=crashed.run_after)
    assert rerun.ok, rerun.output[-4000:]
    assert "was committed but not published; published it now" in rerun.output

    replay = p.run(None, conf={"mode": "replay", "batch_ids": "2", "reason": "test replay on S3"})
    assert replay.ok, replay.output[-4000:]

    report = verify.check_delta(table, p.expected_ids(set()), p.malformed(set()), p.ledger, p.name,
                                storage_options=options)
    assert report.ok, report.summary()
    assert report.output == len(p.expected_ids(set()))
    from deltalake import DeltaTable

    marked = [h.get("offsetbatch.batch-id") for h in reversed(DeltaTable(table, storage_options=options).history())]
    assert marked == ["1", "2", "3", "4"]  # one commit per batch; the replay (batch 4) replaced batch 2's rows
