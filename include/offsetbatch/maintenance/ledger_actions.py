"""The ledger's part of a maintenance pass: its history past ``maintenance.ledger_retain``
summarized (``ledger.history``), and old lag-trigger run events dropped, as ``Action``s."""

from __future__ import annotations

from offsetbatch.ledger import Ledger, history
from offsetbatch.sinks.maintenance import Action, Horizon


def actions(ledger: Ledger, pipeline_name: str, horizon: Horizon,
            chunk: int = history.CHUNK_BATCHES) -> list[Action]:
    """The ledger's maintenance actions for ``pipeline_name`` at ``horizon.ledger_before``; reads only.

    At most two: ``ledger.summarize-history`` (batches, their ranges and per-batch events folded into
    the summaries) and ``ledger.drop-run-events`` (``history.RUN_EVENTS`` past the horizon); none when
    there is nothing to do. Each ``apply`` takes the pipeline's ledger lock per chunk of ``chunk`` batches
    itself (``offsetbatch.maintenance.run`` calls it without the lock) and returns what it changed."""
    before = history.utc(horizon.ledger_before)
    limit = history.chunk_size(ledger, pipeline_name, chunk)
    found = history.count(ledger, pipeline_name, before, limit)
    out = []
    if found["batches"]:
        out.append(Action(
            "ledger.summarize-history", f"ledger of {pipeline_name}",
            f"summarize {found['batches']:,} finished batches ({found['replays']:,} replays) committed before "
            f"{before.isoformat()}, with {found['ranges']:,} ranges and {found['events']:,} per-batch events, into "
            f"one row per partition", counts=found,
            apply=lambda: history.summarize(ledger, pipeline_name, before, limit)))
    old = history.count_run_events(ledger, pipeline_name, before)
    if old:
        out.append(Action(
            "ledger.drop-run-events", f"ledger of {pipeline_name}",
            f"delete {old:,} {'/'.join(history.RUN_EVENTS)} events from before {before.isoformat()}",
            counts={"events": old},
            apply=lambda: history.drop_run_events(ledger, pipeline_name, before, chunk)))
    return out
