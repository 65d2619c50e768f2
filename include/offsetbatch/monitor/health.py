"""When the Pipelines page shows a pipeline in a warning state, and why (pure; unit-tested).

A state is ``ok``, ``warning`` or ``error``; every finding is one sentence an operator can act on.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

GROWING_RUNS = 3  # the lag rose this many times in a row: the pipeline falls behind


@dataclass(frozen=True)
class Finding:
    level: str  # "warning" | "error"
    text: str


def lag_growing(history: list[int], now: int | None) -> bool:
    """True when the lag rose ``GROWING_RUNS`` times in a row over the last observations: the lag
    at each recent plan, then the live figure when Kafka answered (``now``)."""
    values = history[-GROWING_RUNS:] + [now] if now is not None else history[-(GROWING_RUNS + 1):]
    return len(values) == GROWING_RUNS + 1 and all(b > a for a, b in zip(values, values[1:]))


def assess(status: dict, summary: dict, lag_points: list[dict]) -> tuple[str, list[Finding]]:
    """``status``: ``PipelineStatus.to_dict()``; ``summary``: ``ledger.queries.summary``;
    ``lag_points``: ``ledger.queries.lag_history``."""
    found: list[Finding] = []
    name = status["pipeline"]
    if status.get("kafka_error"):
        found.append(Finding("warning", f"Kafka unreachable, lag unknown: {status['kafka_error']}"))
    if status.get("missing"):
        found.append(Finding("error", f"{', '.join(status['missing'])}: not on the Kafka cluster; no run reads it and "
                                      f"no lag trigger fires for it until it exists (create it, or fix kafka.topics "
                                      f"or kafka.pattern)"))
    last = summary.get("last_batch")
    if last and last["status"] == "planned" and last["attempts"]:
        found.append(Finding("error", (
            f"last run failed: batch {last['batch_id']} ({last['kind']}, run {last['run_id']}) is not committed after "
            f"{last['attempts']} attempt(s); the next run re-executes it unchanged. See the run's spark_job/commit logs.")))
    elif last and last["status"] == "planned" and (summary.get("last_batch_age_seconds") or 0) > 3600:
        found.append(Finding("warning", (
            f"batch {last['batch_id']} was planned {summary['last_batch_age_seconds'] / 3600:.1f} h ago by run "
            f"{last['run_id']} and has not run yet")))
    lag = status.get("lag_records")
    if lag_growing([p["lag"] for p in lag_points], lag):
        recent = " → ".join(f"{p['lag']:,}" for p in lag_points[-GROWING_RUNS:])
        found.append(Finding("warning", f"lag growing: {recent} → {lag:,} records now; {name} reads less per run "
                                        f"than arrives (raise caps.max_records_per_batch or run more often)"))
    for p in status.get("partitions", []):
        if p.get("lag_note"):
            found.append(Finding("warning", f"{p['topic']}/{p['partition']}: {p['lag_records']:,} record(s) wait behind "
                                            f"a record from the future ({p['lag_note']}); the next run reads the "
                                            f"partition to its log end"))
    lost = summary.get("last_24h", {})
    if lost.get("gaps"):
        found.append(Finding("error", f"data loss in the last 24 h: {lost['records_lost']:,} records in "
                                      f"{lost['gaps']} gap(s) were never read (see Data-loss gaps)"))
    state = "error" if any(f.level == "error" for f in found) else "warning" if found else "ok"
    return state, found


def as_dicts(findings: list[Finding]) -> list[dict]:
    return [asdict(f) for f in findings]
