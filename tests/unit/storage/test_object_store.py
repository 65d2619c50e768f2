"""The object-store half of issue 27, as logic: an Airflow ``aws`` connection's fields as both
clients take them, the config's refusals, and the files sink's in-place publication (nothing moved,
the manifest names the attempt's files) on fsspec's in-memory filesystem standing in for the
bucket. The integration suite runs the same against S3Proxy, a real S3 API, with Spark and S3A."""

from __future__ import annotations

import fsspec
import pytest
import yaml

from offsetbatch import storage
from offsetbatch.config import load_config
from offsetbatch.errors import ConfigError, StorageConnectionError
from offsetbatch.job.read import kafka_client_options
from offsetbatch.jobspec import Manifest, RangeReport
from offsetbatch.sinks.files import FilesSink
from offsetbatch.storage.s3 import S3Settings

EXTRA = {"endpoint_url": "http://127.0.0.1:19500", "region_name": "eu-west-1",
         "config_kwargs": {"s3": {"addressing_style": "path"}}}


def test_an_aws_connection_maps_to_s3a_and_back():
    s = S3Settings.from_fields("lake", "AKID", "s3cr3t", {**EXTRA, "s3a_options": {"fs.s3a.connection.maximum": 64}})
    opts = s.hadoop_options()
    assert opts["fs.s3a.access.key"] == "AKID" and opts["fs.s3a.secret.key"] == "s3cr3t"
    assert opts["fs.s3a.endpoint"] == "http://127.0.0.1:19500" and opts["fs.s3a.connection.ssl.enabled"] == "false"
    assert opts["fs.s3a.endpoint.region"] == "eu-west-1" and opts["fs.s3a.path.style.access"] == "true"
    assert opts["fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"  # s3:// reaches S3A too
    assert opts["fs.s3a.connection.maximum"] == "64"
    back = S3Settings.from_hadoop_options(opts)
    assert (back.access_key, back.secret_key, back.endpoint, back.region, back.path_style, back.s3a_options) == \
        ("AKID", "s3cr3t", "http://127.0.0.1:19500", "eu-west-1", True, {"fs.s3a.connection.maximum": "64"})
    assert "s3cr3t" not in repr(s) and "AKID" not in repr(s)


def test_aws_itself_uses_virtual_hosts_and_the_default_region():
    s = S3Settings.from_fields("aws", "AKID", "secret", {})
    assert (s.endpoint, s.region, s.path_style) == (None, "us-east-1", False)
    assert "fs.s3a.endpoint" not in s.hadoop_options()


def test_a_session_token_selects_the_temporary_credentials_provider():
    opts = S3Settings.from_fields("sts", "AKID", "secret", {"aws_session_token": "tok"}).hadoop_options()
    assert opts["fs.s3a.session.token"] == "tok"
    assert opts["fs.s3a.aws.credentials.provider"].endswith("TemporaryAWSCredentialsProvider")


@pytest.mark.parametrize("login,password,extra,match", [
    ("AKID", "secret", {"role_arn": "arn:aws:iam::1:role/x"}, "extra key.*role_arn.*not use"),
    (None, "secret", {}, "access key id as login"),
    ("AKID", "", {}, "secret access key as password"),
    ("AKID", "secret", {"s3a_options": {"fs.s3a.secret.key": "x"}}, "remove fs.s3a.secret.key"),
    ("AKID", "secret", {"s3a_options": {"spark.jars": "x"}}, "only hold fs.s3a"),
    ("AKID", "secret", {"config_kwargs": {"s3": {"addressing_style": "sideways"}}}, "addressing_style"),
])
def test_what_the_connection_cannot_do_is_refused_by_name(login, password, extra, match):
    with pytest.raises(StorageConnectionError, match=match) as err:
        S3Settings.from_fields("lake", login, password, extra)
    assert "'lake'" in str(err.value)


def _config(tmp_path, sink):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "orders", "kafka": {"topics": ["orders"]},
                                    "value": {"format": "json", "schema": "id STRING"}, "sink": sink}))
    return load_config(path)


def test_a_table_on_s3_needs_its_connection_and_a_connection_needs_s3(tmp_path):
    with pytest.raises(ConfigError, match="set sink.storage_conn_id"):
        _config(tmp_path, {"path": "s3a://lake/orders"})
    with pytest.raises(ConfigError, match="not an s3a:// or s3:// location"):
        _config(tmp_path, {"path": "/data/orders", "storage_conn_id": "lake"})
    assert _config(tmp_path, {"path": "s3://lake/orders", "storage_conn_id": "lake"}).sink.storage_conn_id == "lake"


def test_an_unbound_bucket_is_a_clear_error():
    with pytest.raises(StorageConnectionError, match="no storage connection is bound to bucket 'nowhere'"):
        storage.exists("s3a://nowhere/t/x.json")


def test_the_kafka_reader_gets_only_kafka_options():
    class Spec:
        kafka_options = {"kafka.bootstrap.servers": "b:9092"}
        pipeline, batch_id = "orders", 1
    opts = kafka_client_options(Spec(), {"fs.s3a.secret.key": "x", "kafka.ssl.key.password": "y"})
    assert opts == {"kafka.bootstrap.servers": "b:9092", "kafka.ssl.key.password": "y"}


# ---- the files sink, published in place ------------------------------------------------------------

def _stage(sink: FilesSink, batch_id: int, attempt: str, output_id: int) -> list[str]:
    layout = sink.layout
    files = [f"{layout.staging_data(batch_id, attempt)}/part-0000{i}.parquet" for i in range(2)]
    for f in files:
        with fsspec.filesystem("memory").open(f.partition("://")[2], "wb") as out:
            out.write(b"PAR1")
    Manifest(pipeline="orders", output_id=output_id, ranges=[RangeReport("t", 0, 0, 10, 10, 10)], rows_in=10,
             rows_out=10, rows_rejected=0, bytes_in=100, data_files=files, rejected_files=[], job_seconds=1.0,
             spark_version="4.3.0", attempt=attempt).save(layout.staging_manifest(batch_id, attempt))
    return files


def test_publishing_on_an_object_store_moves_nothing(bucket, monkeypatch):
    sink = FilesSink.at("s3a://lake/orders", "orders", "lake")
    assert sink.in_place
    moved = []
    monkeypatch.setattr(storage, "move", lambda *a: moved.append(a))
    files = _stage(sink, 1, "a1", 1)
    _stage(sink, 1, "crashed", 1)  # a killed attempt of the same batch
    sink.publish(1, 1, "a1")
    assert moved == []
    assert sink.published_ids() == [1]
    published = sink.published_manifests()[1]
    assert published.data_files == files and published.location == sink.layout.attempt(1, "a1")
    assert storage.children(sink.layout.attempts(1)) == ["attempt=a1"], "the other attempt is deleted"
    sink.publish(1, 1, "a1")  # idempotent: a retried commit publishes again
    assert sink.published_manifests()[1].data_files == files


def test_a_replay_swaps_the_manifest_then_deletes_the_old_folder(bucket):
    sink = FilesSink.at("s3a://lake/orders", "orders", "lake")
    old = _stage(sink, 1, "a1", 1)
    sink.publish(1, 1, "a1")
    new = _stage(sink, 5, "r1", 1)  # batch 5 replays batch 1's ranges
    sink.publish(5, 1, "r1")
    assert sink.published_manifests()[1].data_files == new
    assert not any(storage.exists(f) for f in old)
    assert storage.files(f"{sink.layout.meta}/trash", suffix=".json") == []


def test_a_crash_after_the_manifest_swap_leaves_a_note_the_next_publish_sweeps(bucket, monkeypatch):
    sink = FilesSink.at("s3a://lake/orders", "orders", "lake")
    old = _stage(sink, 1, "a1", 1)
    sink.publish(1, 1, "a1")
    _stage(sink, 5, "r1", 1)
    monkeypatch.setattr(FilesSink, "_sweep", lambda self: None)  # dies before deleting the old folder
    sink.publish(5, 1, "r1")
    assert all(storage.exists(f) for f in old)
    assert len(storage.files(f"{sink.layout.meta}/trash", suffix=".json")) == 1
    monkeypatch.undo()
    _stage(sink, 6, "b1", 6)
    sink.publish(6, 6, "b1")  # any later publish sweeps it
    assert not any(storage.exists(f) for f in old)
    assert sink.published_ids() == [1, 6]


def test_retiring_a_batch_removes_its_manifest_and_its_files(bucket):
    sink = FilesSink.at("s3a://lake/orders", "orders", "lake")
    files = _stage(sink, 1, "a1", 1)
    sink.publish(1, 1, "a1")
    sink.retire(1)
    assert sink.published_ids() == [] and not any(storage.exists(f) for f in files)


def test_a_published_replay_folder_survives_a_later_batch_of_the_same_id(bucket):
    """A ledger rebuilt from the manifests numbers batches by output id: its next batch may have
    the id of an earlier replay whose folder holds published output."""
    sink = FilesSink.at("s3a://lake/orders", "orders", "lake")
    _stage(sink, 1, "a1", 1)
    sink.publish(1, 1, "a1")
    replayed = _stage(sink, 3, "r1", 1)  # batch 3 replayed batch 1: output 1 now lives in batch 3's folder
    sink.publish(3, 1, "r1")
    _stage(sink, 3, "new", 3)  # the rebuilt ledger's batch 3
    sink.publish(3, 3, "new")
    assert all(storage.exists(f) for f in replayed)
    assert sink.published_ids() == [1, 3]
    sink.discard(3, "r1")  # a redundant attempt's discard never takes published output either
    assert all(storage.exists(f) for f in replayed)


def test_an_iceberg_warehouse_on_s3_needs_the_connection_and_staging_beside_it(tmp_path):
    base = {"type": "iceberg", "namespace": "lake", "table": "events", "catalog": "sqlite:////tmp/c.db"}
    with pytest.raises(ConfigError, match="sink.warehouse 's3a://lake/wh' is on an S3 API"):
        _config(tmp_path, {**base, "path": "/data/staging", "warehouse": "s3a://lake/wh"})
    with pytest.raises(ConfigError, match="must both be on the object store or both not"):
        _config(tmp_path, {**base, "path": "s3a://lake/staging", "warehouse": "/data/wh", "storage_conn_id": "lake"})
    cfg = _config(tmp_path, {**base, "path": "s3a://lake/staging", "warehouse": "s3a://lake/wh", "storage_conn_id": "lake"})
    assert cfg.sink.storage_conn_id == "lake"
    assert S3Settings.from_fields("lake", "AKID", "s", EXTRA).pyiceberg_properties() == {
        "s3.access-key-id": "AKID", "s3.secret-access-key": "s", "s3.region": "eu-west-1",
        "s3.force-virtual-addressing": "false", "s3.endpoint": "http://127.0.0.1:19500",
        "s3.connect-timeout": "5", "s3.request-timeout": "15",
        "s3.retry-strategy-impl": "offsetbatch.storage.s3.CommitSideRetries"}


def test_publishing_leaves_a_folder_another_attempt_is_still_writing(tmp_path, monkeypatch):
    """Two runs executing one batch at once: the first to commit publishes, and the other attempt's
    folder, still being written, may not be removable yet (CI: ENOTEMPTY). The publication stands;
    the other attempt's commit discards its output."""
    sink = FilesSink.at(str(tmp_path / "t"), "orders")
    layout = sink.layout
    (tmp_path / "t" / "_offsetbatch" / "attempts" / "batch_id=1" / "attempt=a1" / "data").mkdir(parents=True)
    Manifest(pipeline="orders", output_id=1, ranges=[], rows_in=0, rows_out=0, rows_rejected=0, bytes_in=0,
             data_files=[], rejected_files=[], job_seconds=0, spark_version="4.3.0",
             attempt="a1").save(layout.staging_manifest(1, "a1"))
    real = storage.remove

    def busy(uri, best_effort=False):
        if uri == layout.attempts(1):
            if not best_effort:
                raise OSError(39, "Directory not empty")
            return False
        return real(uri, best_effort)
    monkeypatch.setattr(storage, "remove", busy)
    sink.publish(1, 1, "a1")
    assert sink.published_ids() == [1]


def test_an_s3_failure_no_retry_fixes_is_a_permanent_error_naming_the_connection(monkeypatch):
    """pyarrow raises OSError for everything; a task must not retry refused credentials or a
    missing bucket (ConfigError is permanent: dag.retry_policy), but may retry an endpoint that
    did not answer, and a missing object stays what it is."""
    from offsetbatch.dag.retry_policy import is_permanent
    from offsetbatch.errors import StorageUnreachableError

    class Refusing:
        def __init__(self, text):
            self.text = text

        def exists(self, path):
            raise OSError(self.text)

    monkeypatch.setitem(storage._s3_connections, "lake", "lake_s3")
    for text, kind, permanent in (
            ("AWS Error ACCESS_DENIED during HeadObject operation", StorageConnectionError, True),
            ("AWS Error NO_SUCH_BUCKET during ListObjectsV2 operation", StorageConnectionError, True),
            ("AWS Error NETWORK_CONNECTION during HeadObject operation: Could not connect", StorageUnreachableError, False)):
        monkeypatch.setitem(storage._s3_buckets, "lake", Refusing(text))
        with pytest.raises(kind, match="connection 'lake_s3'") as err:
            storage.exists("s3a://lake/t/x.json")
        assert is_permanent(err.value) is permanent
    monkeypatch.setitem(storage._s3_buckets, "lake", Refusing("something else"))
    with pytest.raises(OSError, match="something else"):
        storage.exists("s3a://lake/t/x.json")


def test_an_endpoint_that_accepts_and_never_answers_fails_within_the_stall_bound(monkeypatch):
    """A real listening socket that never answers (issue 41, case 15: 200 s per attempt with the
    AWS SDK's defaults, then Airflow's retries). The stall bound is cut to 2 s here; the default 15 s
    x 2 sends measured 44 s."""
    import socket
    import time

    from offsetbatch.errors import StorageUnreachableError
    from offsetbatch.storage import s3

    monkeypatch.setattr(s3, "STALL_TIMEOUT_S", 2)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)  # the kernel completes the handshakes; nothing ever reads or answers
        port = server.getsockname()[1]
        settings = S3Settings.from_fields("lake", "AKID", "secret", {"endpoint_url": f"http://127.0.0.1:{port}",
                                                                     "config_kwargs": {"s3": {"addressing_style": "path"}}})
        started = time.monotonic()
        with pytest.raises(StorageUnreachableError) as err:
            s3.check_bucket(settings, "s3a://lake/orders")
        took = time.monotonic() - started
    assert f"endpoint http://127.0.0.1:{port}): the endpoint accepted the connection and then sent nothing for 2 s, " \
           f"2 times" in str(err.value)
    assert took < 2 * s3.ATTEMPTS * (2 + 8), took  # two sends of a 2 s stall, the SDK's backoff and curl's tick


def test_pyiceberg_gets_the_same_timeouts_and_retries():
    from pyiceberg.io.pyarrow import PyArrowFileIO, _import_retry_strategy

    from offsetbatch.storage import s3

    props = S3Settings.from_fields("lake", "AKID", "secret", EXTRA).pyiceberg_properties()
    assert (props["s3.connect-timeout"], props["s3.request-timeout"]) == \
        (str(s3.CONNECT_TIMEOUT_S), str(s3.STALL_TIMEOUT_S))
    strategy = _import_retry_strategy(props["s3.retry-strategy-impl"])
    assert isinstance(strategy, s3.CommitSideRetries) and strategy.max_attempts == s3.ATTEMPTS
    assert PyArrowFileIO(props).new_input("s3://lake/x").location == "s3://lake/x"  # the properties load, lazily
