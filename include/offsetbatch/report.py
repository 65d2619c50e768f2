"""Rich tables of a pipeline's state, for the CLI and the demo. They render the structures of
``offsetbatch.status`` (the same ones ``--json`` prints), so tables and JSON never disagree."""

from __future__ import annotations

from rich.table import Table

from offsetbatch.reset import ResetPlan
from offsetbatch.status import PipelineStatus


def status_table(st: PipelineStatus) -> Table:
    """Per partition: frontier vs log end, lag in records and time; lagging rows in yellow."""
    title = f"{st.pipeline} ({st.dag_id})" + (f"  [red]Kafka: {st.kafka_error}[/]" if st.kafka_error else "")
    t = Table(title=title, title_justify="left")
    for col in ("topic/partition", "start", "frontier", "log end", "lag (records)", "lag (time)", "last batch"):
        t.add_column(col, justify="left" if col == "topic/partition" else "right")
    for p in st.partitions:
        t.add_row(f"{p.topic}/{p.partition}", str(p.start_offset), str(p.frontier),
                  "?" if p.log_end is None else str(p.log_end), "?" if p.lag_records is None else str(p.lag_records),
                  "" if p.lag_seconds is None else f"{p.lag_seconds:.0f}s", str(p.last_batch or ""),
                  style="yellow" if p.lag_records else None)
    return t


def batches_table(title: str, batches: list[dict]) -> Table:
    """Batches as given by ``status.batch_dict``."""
    t = Table(title=title, title_justify="left")
    left = ("kind", "status", "airflow run", "run type", "interval", "committed at")
    for col in ("batch", "kind", "status", "airflow run", "run type", "interval", "partitions", "records", "rows out",
                "rejected", "job s", "committed at"):
        t.add_column(col, justify="left" if col in left else "right")
    for b in batches:
        interval = (f"{b['data_interval_start'][:16]} → {b['data_interval_end'][11:16]}"
                    if b.get("data_interval_start") and b.get("data_interval_end") else "")
        t.add_row(str(b["batch_id"]), b["kind"], b["status"], b["run_id"] or "", b.get("run_type") or "", interval,
                  str(len(b["ranges"])), str(b["records"]),
                  "" if b.get("rows_out") is None else str(b["rows_out"]),
                  "" if b.get("rows_rejected") is None else str(b["rows_rejected"]),
                  "" if b.get("job_seconds") is None else f"{b['job_seconds']:.1f}", (b.get("committed_at") or "")[:19])
    return t


def ranges_table(title: str, batches: list[dict]) -> Table:
    t = Table(title=title, title_justify="left")
    for col in ("batch", "topic/partition", "from", "until", "records"):
        t.add_column(col, justify="left" if col == "topic/partition" else "right")
    for b in batches:
        for r in b["ranges"]:
            t.add_row(str(b["batch_id"]), f"{r['topic']}/{r['partition']}", str(r["from_offset"]),
                      str(r["until_offset"]), str(r["until_offset"] - r["from_offset"]))
    return t


def reset_table(plan: ResetPlan, applied: bool) -> Table:
    """Per partition: the log, the frontier and where the reset puts it (changes in yellow)."""
    t = Table(title=f"{plan.pipeline}: reset to {plan.target} ({'APPLIED' if applied else 'dry run, nothing changed'})",
              title_justify="left", caption=_reset_caption(plan), caption_justify="left")
    for col in ("topic/partition", "log start", "log end", "frontier", "new frontier", "move"):
        t.add_column(col, justify="left" if col in ("topic/partition", "move") else "right")
    for m in plan.moves:
        note = m.direction + (f" (asked {m.requested}; batch boundary)" if m.requested != m.to else "")
        t.add_row(str(m.tp), str(m.log_start), str(m.log_end), "" if m.frontier is None else str(m.frontier),
                  str(m.to), note, style=None if m.direction == "unchanged" else "yellow")
    return t


def _reset_caption(plan: ResetPlan) -> str:
    parts = []
    if plan.superseded:
        parts.append(f"superseded batches (output replaced when re-read): {', '.join(map(str, plan.superseded))}")
    if plan.abandoned:
        parts.append(f"abandoned planned batches: {', '.join(map(str, plan.abandoned))}")
    return "; ".join(parts)
