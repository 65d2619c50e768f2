"""Rich tables of a pipeline's ledger state for the CLI and the demo: batches, ranges, frontier and lag."""

from __future__ import annotations

from rich.table import Table

from offsetbatch.kafka_source import KafkaSource
from offsetbatch.ledger import Ledger
from offsetbatch.model import TopicPartition


def batches_table(ledger: Ledger, pipeline: str, limit: int = 20) -> Table:
    t = Table(title=f"{pipeline}: last {limit} batches", title_justify="left")
    for col in ("batch", "kind", "status", "airflow run", "partitions", "records", "rows out", "rejected", "job s"):
        t.add_column(col, justify="left" if col in ("kind", "status", "airflow run") else "right")
    for b in ledger.list_batches(pipeline, limit):
        s = b.stats
        t.add_row(str(b.batch_id), b.kind, b.status, b.run_id or "", str(len(b.ranges)), str(b.records),
                  str(s.get("rows_out") if s.get("rows_out") is not None else ""),
                  str(s.get("rows_rejected") if s.get("rows_rejected") is not None else ""),
                  f"{s['job_seconds']:.1f}" if s.get("job_seconds") else "")
    return t


def ranges_table(ledger: Ledger, pipeline: str, limit: int = 5) -> Table:
    t = Table(title=f"{pipeline}: ranges of the last {limit} batches", title_justify="left")
    for col in ("batch", "topic/partition", "from", "until", "records"):
        t.add_column(col, justify="left" if col == "topic/partition" else "right")
    for b in reversed(ledger.list_batches(pipeline, limit)):
        for r in b.ranges:
            t.add_row(str(b.batch_id), f"{r.topic}/{r.partition}", str(r.from_offset), str(r.until_offset), str(r.size))
    return t


def frontier_table(ledger: Ledger, pipeline: str, kafka: KafkaSource | None = None) -> Table:
    rows = ledger.frontier_rows(pipeline)
    ends = {}
    if kafka is not None and rows:
        tps = [TopicPartition(r["topic"], r["partition"]) for r in rows]
        ends = {tp: po.latest for tp, po in kafka.offsets(tps).items()}
    t = Table(title=f"{pipeline}: frontier and lag", title_justify="left")
    for col in ("topic/partition", "start", "frontier", "log end", "lag (records)", "last batch"):
        t.add_column(col, justify="left" if col == "topic/partition" else "right")
    for r in rows:
        end = ends.get(TopicPartition(r["topic"], r["partition"]))
        t.add_row(f"{r['topic']}/{r['partition']}", str(r["start_offset"]), str(r["next_offset"]),
                  "" if end is None else str(end), "" if end is None else str(end - r["next_offset"]),
                  str(r["batch_id"] or ""))
    return t
