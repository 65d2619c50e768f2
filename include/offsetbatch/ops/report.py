"""Rich tables of a pipeline's state, for the CLI and the demo. They render the structures of
``offsetbatch.ops.status`` (the same ones ``--json`` prints), so tables and JSON never disagree."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from offsetbatch.commit.rebuild import RebuildPlan
from offsetbatch.maintenance import Pass
from offsetbatch.ops.status import PipelineStatus
from offsetbatch.plan.reset import ResetPlan


def status_table(st: PipelineStatus) -> Table:
    """Per partition: frontier vs log end, lag in records and time; lagging rows in yellow. The
    caption says whether data was lost in the last 24 h (in red when it was)."""
    title = f"{st.pipeline} ({st.dag_id})" + (f"  [red]Kafka: {st.kafka_error}[/]" if st.kafka_error else "")
    t = Table(title=title, title_justify="left", caption=_caption(st), caption_justify="left")
    for col in ("topic/partition", "start", "frontier", "log end", "lag (records)", "lag (time)", "last batch"):
        t.add_column(col, justify="left" if col == "topic/partition" else "right")
    for p in st.partitions:
        t.add_row(f"{p.topic}/{p.partition}", str(p.start_offset), str(p.frontier),
                  "?" if p.log_end is None else str(p.log_end), "?" if p.lag_records is None else str(p.lag_records),
                  ("" if p.lag_seconds is None else f"{p.lag_seconds:.0f}s") + ("*" if p.lag_note else ""),
                  str(p.last_batch or ""),
                  style="yellow" if p.lag_records else None)
    return t


def _caption(st: PipelineStatus) -> str:
    """What starts the runs (the cron, the lag trigger's rule), data lost in the last 24 h (in red
    when there was), then a line per partition whose time lag is not the age of its oldest waiting
    record (the ``*`` in its row)."""
    runs = f"schedule {st.schedule}" if st.schedule else "no schedule"
    if st.trigger:
        runs += f"; lag trigger: {st.trigger}"
    lines = [f"runs: {runs}"]
    if st.missing:
        lines += [f"[red]{escape(', '.join(st.missing))}: not on the Kafka cluster; no run reads it and no lag "
                  f"trigger fires for it until it exists (create it, or fix kafka.topics / kafka.pattern)[/]"]
    if st.trigger:
        fired = st.last_fired
        lines += [f"lag trigger last fired {fired['at'][:19].replace('T', ' ')}Z: {escape(fired['summary'])}" if fired
                  else "lag trigger: has not started a run yet"]
    if not st.gaps_24h:
        lines += ["data lost in the last 24 h: none"]
    else:
        lines += [f"[red]data lost in the last 24 h: {st.records_lost_24h:,} records in {st.gaps_24h} gap(s), never "
                  f"read (retention before reading, or a forward reset): 'offsetbatch events {st.pipeline}' says who "
                  f"and why[/]"]
    lines += [f"[yellow]* {p.topic}/{p.partition}: {escape(p.lag_note)}[/]" for p in st.partitions if p.lag_note]
    return "\n".join(lines)


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


def events_table(title: str, events: list[dict]) -> Table:
    """Audit events as given by ``ledger.queries.event_rows``, newest first: when, what, who, why."""
    t = Table(title=title, title_justify="left")
    for col in ("time (UTC)", "kind", "actor", "batch", "reason", "detail"):
        t.add_column(col, justify="right" if col == "batch" else "left", overflow="fold")
    for e in events:
        t.add_row((e["at"] or "")[:19].replace("T", " "), e["kind"], escape(e["actor"] or ""),  # free text: no markup
                  "" if e["batch_id"] is None else str(e["batch_id"]), escape(e["reason"] or ""), escape(e["summary"]),
                  style="yellow" if e["kind"] in ("frontier_reset", "data_loss_skipped") else None)
    return t


def rebuild_table(plan: RebuildPlan, applied: bool) -> Table:
    """Per partition: where the rebuilt ledger starts and stands; the caption lists batches and gaps."""
    gaps = ", ".join(f"{g.topic}/{g.partition}[{g.from_offset},{g.until_offset})" for g in plan.gaps) or "none"
    t = Table(title=f"{plan.pipeline}: ledger rebuilt from {plan.table} ({'APPLIED' if applied else 'dry run'})",
              title_justify="left", caption_justify="left",
              caption=f"{len(plan.batches)} committed batch(es) {_id_list(sorted(plan.batches))}, {plan.records} "
                      f"records; gaps between published ranges: {gaps}")
    for col in ("topic/partition", "first offset", "frontier"):
        t.add_column(col, justify="left" if col == "topic/partition" else "right")
    for tp in sorted(plan.frontier):
        t.add_row(str(tp), str(plan.starts[tp]), str(plan.frontier[tp]))
    return t


def _id_list(ids: list[int], limit: int = 10) -> str:
    return ", ".join(map(str, ids[:limit])) + (f", … {len(ids) - limit} more" if len(ids) > limit else "")


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


def maintenance_table(result: Pass) -> Table:
    """One row per action: what it planned, and (unless a dry run) what it changed and how long."""
    verb = "would do" if result.dry_run else "did"
    table = Table(title=f"{result.pipeline}: maintenance pass ({verb}), history kept after "
                        f"{result.horizon.retain_before:%Y-%m-%d %H:%MZ}")
    for col in ("step", "target", "plan", "changed", "seconds"):
        table.add_column(col, justify="right" if col == "seconds" else "left")
    for o in result.outcomes:
        changed = "-" if o.done is None else (", ".join(f"{k} {v:,}" for k, v in o.done.items()) or "nothing")
        table.add_row(o.action.step, escape(o.action.target), escape(o.action.summary), changed,
                      "-" if o.done is None else f"{o.seconds:.1f}")
    if not result.outcomes:
        table.caption = "nothing to maintain"
    elif result.rolled_forward:
        table.caption = f"published first (committed, left unpublished by a crash): batch(es) " \
                        f"{_id_list(result.rolled_forward)}"
    return table
