"""Time lag in ``status``: the age of the oldest waiting record, never 0 while records wait."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from rich.console import Console

from offsetbatch.ops.report import status_table
from offsetbatch.ops.status import PartitionStatus, PipelineStatus, _time_lag

NOW = datetime(2026, 11, 24, 12, tzinfo=timezone.utc)
NOW_MS = NOW.timestamp() * 1000
ROW = {"next_offset": 300, "updated_at": (NOW - timedelta(minutes=5)).replace(tzinfo=None)}  # SQLite: no zone


def test_caught_up_is_zero_and_a_past_record_gives_its_age():
    assert _time_lag(0, None, ROW, NOW_MS) == (0.0, None)
    assert _time_lag(12, NOW_MS - 90_000, ROW, NOW_MS) == (90.0, None)
    assert _time_lag(12, None, ROW, NOW_MS) == (None, None)  # Kafka did not answer for it


def test_a_future_stamped_record_counts_the_wait_since_the_frontier_moved():
    future = datetime(2099, 1, 1, tzinfo=timezone.utc).timestamp() * 1000
    seconds, note = _time_lag(12, future, ROW, NOW_MS)
    assert seconds == 300.0
    assert note == "offset 300 is stamped 2099-01-01 00:00Z, in the future; waiting since the frontier last moved"


def test_the_table_marks_such_a_partition_and_explains_it():
    st = PipelineStatus("p", "offsetbatch_p", [PartitionStatus("t", 0, 0, 300, 312, 12, 300.0, 1, "offset 300 is ...")])
    console = Console(width=200, record=True)
    console.print(status_table(st))
    text = console.export_text()
    assert "300s*" in text and "* t/0: offset 300 is ..." in text


def test_the_table_says_what_starts_the_runs():
    console = Console(width=250, record=True)
    rule = "a run starts when 10,000 records wait or the oldest waiting record has waited 2m (polled every 10s)"
    console.print(status_table(PipelineStatus("p", "offsetbatch_p", schedule="0 * * * *", trigger=rule)))
    console.print(status_table(PipelineStatus("q", "offsetbatch_q", schedule=None, trigger=rule)))
    text = " ".join(console.export_text().split())  # the caption wraps at the table's width
    assert f"runs: schedule 0 * * * *; lag trigger: {rule}" in text and f"runs: no schedule; lag trigger: {rule}" in text


def test_status_names_a_topic_the_cluster_lacks_and_the_table_says_why_nothing_fires(tmp_path):
    """``pipeline_status`` asks the cluster for the pipeline's topics (a real SQLite ledger; the admin
    client's one call stood in): a named topic it lacks is listed, and the table's caption says no
    run reads it and no trigger fires for it."""
    import yaml

    from offsetbatch.ledger import Ledger
    from offsetbatch.model import TopicPartition
    from offsetbatch.ops.status import pipeline_status
    from offsetbatch.pipeline import Pipeline

    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "p", "kafka": {"topics": ["orders", "refunds"]},
                                    "sink": {"path": str(tmp_path / "t")}, "airflow": {"trigger": {"min_records": 10}}}))

    class Admin:
        def partitions(self, topics=None, pattern=None):
            return {TopicPartition("orders", 0)}

    with Ledger(f"sqlite:///{tmp_path}/ledger.db", create=True) as ledger:
        st = pipeline_status(Pipeline.load(path), ledger, Admin())
    assert st.missing == ["refunds"] and st.kafka_error is None
    console = Console(width=300, record=True)
    console.print(status_table(st))
    assert ("refunds: not on the Kafka cluster; no run reads it and no lag trigger fires for it until it exists"
            in " ".join(console.export_text().split()))
