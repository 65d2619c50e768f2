"""The pipeline's input asset: the lag trigger's events land on it (``LagTrigger`` through an
``AssetWatcher``), and the plan task reads from them why the run started."""

from __future__ import annotations

from typing import Any


def input_asset_uri(name: str) -> str:
    """The asset that stands for a pipeline's waiting input: the trigger's events land on it."""
    return f"offsetbatch://pipelines/{name}/input"


def fired_by(triggering_events: Any, uri: str) -> dict | None:
    """Why the lag trigger started this run, from the asset events that queued it (the context's
    ``triggering_asset_events``): the newest event of the trigger on ``uri``, with when it fired and
    how many of its events the run took (the scheduler folds firings that queued behind one run into
    it). None for a run the trigger did not start."""
    if not triggering_events:
        return None
    found = []
    for asset in list(triggering_events):
        if getattr(asset, "uri", None) != uri:
            continue
        for event in triggering_events[asset]:
            extra = getattr(event, "extra", None) or {}
            if extra.get("from_trigger") and isinstance(extra.get("payload"), dict):
                found.append((getattr(event, "timestamp", None), extra["payload"]))
    if not found:
        return None
    when, payload = max(found, key=lambda f: (f[0] is not None, f[0] or 0))
    fired = {k: payload.get(k) for k in ("reason", "waiting_records", "partitions", "oldest_age_s", "rule")}
    return {**fired, "fired_at": when.isoformat() if hasattr(when, "isoformat") else None, "events": len(found)}
