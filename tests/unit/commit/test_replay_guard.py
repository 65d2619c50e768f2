"""The commit's guard against a replay that would replace published rows with rejections
(``commit.replay_guard``, issue 41 case 7), on a real SQLite ledger and real staged Parquet: the
end-to-end refusal through Airflow and Spark is in tests/integration/runs/test_triggers_and_reset.py."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from offsetbatch.commit import replay_guard
from offsetbatch.dag.retry_policy import is_permanent
from offsetbatch.errors import ReplayRejectsMoreError
from offsetbatch.jobspec import Manifest
from offsetbatch.ledger import Ledger
from offsetbatch.model import OffsetRange, TopicPartition

TP = TopicPartition("t", 0)


@pytest.fixture
def ledger(tmp_path):
    led = Ledger(f"sqlite:///{tmp_path}/ledger.db", create=True)
    with led.lock("p") as conn:
        led.start_partitions(conn, "p", {TP: 0}, "earliest")
        batch = led.insert_batch(conn, "p", "incremental", [OffsetRange("t", 0, 0, 10, 0)], dag_id="d", run_id="r1",
                                 interval=(None, None), output_path="/t")
        led.commit_batch(conn, batch, {"committed_attempt": "a", "rows_out": 10, "rows_rejected": 0},
                         {TP: {"rows": 10, "rejected": 0}})
    return led


def _replay(ledger: Ledger, allow: bool):
    with ledger.lock("p") as conn:
        target = ledger.get_batch("p", 1, conn)
        return ledger.insert_batch(conn, "p", "replay", [], dag_id="d", run_id="r2", interval=(None, None),
                                   output_path="/t", target=target, allow_more_rejected=allow)


def _manifest(tmp_path, rows_out: int, rejected: int) -> Manifest:
    path = tmp_path / "rejected.parquet"
    pq.write_table(pa.table({"kafka_topic": ["t"] * rejected, "kafka_partition": pa.array([0] * rejected, pa.int32()),
                             "kafka_offset": pa.array(range(rejected), pa.int64()),
                             "error": ["writer schema id 1 is not among the planned writers"] * rejected}), path)
    return Manifest(pipeline="p", output_id=1, ranges=[], rows_in=10, rows_out=rows_out, rows_rejected=rejected,
                    bytes_in=0, data_files=[], rejected_files=[str(path)], job_seconds=0, spark_version="x")


def test_a_replay_that_rejects_published_records_is_refused_naming_the_first(ledger, tmp_path):
    replay = _replay(ledger, allow=False)
    with pytest.raises(ReplayRejectsMoreError) as err:
        replay_guard.check_rejections(ledger, replay, _manifest(tmp_path, 8, 2))
    message = str(err.value)
    assert message.startswith("pipeline p batch 2 (replays batch 1, whose output is batch 1's now): it rejects 2 "
                              "record(s) where the output it replaces rejected 0 (rows 10 → 8)")
    assert "the first rejected record: t/0 offset 0: writer schema id 1 is not among the planned writers" in message
    assert "Nothing was committed; the batch stays planned" in message and "allow_more_rejected" in message
    assert is_permanent(err.value)


def test_the_same_or_fewer_rejections_pass(ledger, tmp_path):
    replay = _replay(ledger, allow=False)
    replay_guard.check_rejections(ledger, replay, _manifest(tmp_path, 10, 0))


def test_the_operator_may_allow_it(ledger, tmp_path):
    replay = _replay(ledger, allow=True)
    replay_guard.check_rejections(ledger, replay, _manifest(tmp_path, 8, 2))


def test_an_incremental_batch_is_not_a_replay(ledger, tmp_path):
    replay_guard.check_rejections(ledger, ledger.get_batch("p", 1), _manifest(tmp_path, 8, 2))
