"""``LagTrigger``: the triggerer's watch on one pipeline's waiting records (``airflow.trigger``).

An ``AssetWatcher`` on the pipeline's input asset (``dag.factory``) runs it in the triggerer;
each event it yields is an asset event that queues a run of the pipeline's DAG, which reads
``[frontier, log end)`` capped, through the same plan task as every run (a lag-triggered run has
no logical date). It is the project's own, not the Kafka provider's ``AwaitMessageTrigger``: that
one consumes the topic (a consumer, a group, one event per matching message), where this one
only compares the ledger's frontier with the log ends (``plan.freshness``) and fires once per
crossing. It never raises: the broker or the ledger down, or the pipeline's file gone, it logs
why in the triggerer's log and polls again with backoff, so the DAG never fails for it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from offsetbatch import redact

# The longest wait between two readings that failed: a broker back after an outage is seen within
# 30 s (minute-level freshness), and a down broker costs one request and one warning per 30 s.
BACKOFF_MAX_S = 30.0


class LagTrigger(BaseEventTrigger):
    """Fire when ``min_records`` wait past the pipeline's frontier, or the oldest waiting record
    has waited ``max_delay`` seconds.

    :param config_path: the pipeline's YAML file (read again when it changes)
    :param min_records: records waiting that start a run (None: no count rule)
    :param max_delay: seconds the oldest waiting record may wait (None: no age rule)
    :param poll: seconds between two readings
    """

    def __init__(self, config_path: str, min_records: int | None, max_delay: float | None, poll: float) -> None:
        super().__init__()
        self.config_path = config_path
        self.min_records = min_records
        self.max_delay = max_delay
        self.poll = poll

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"config_path": self.config_path, "min_records": self.min_records, "max_delay": self.max_delay,
                 "poll": self.poll})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        reader = _Reader(self.config_path, self.log)
        delay = self.poll
        self.log.info("pipeline %s: lag trigger watching its waiting records (min_records %s, max_delay %s s, "
                      "poll %s s; config %s)", reader.name, self.min_records, self.max_delay, self.poll,
                      self.config_path)
        try:
            while True:
                try:
                    fired = await asyncio.to_thread(reader.poll)
                    delay = self.poll
                except Exception as exc:  # noqa: BLE001 - a trigger that raises stops watching for good
                    reader.reset()
                    delay = min(delay * 2, BACKOFF_MAX_S)
                    self.log.warning("pipeline %s: lag trigger could not read the waiting records (%s: %s); "
                                     "trying again in %.0f s", reader.name, type(exc).__name__,
                                     redact.url(" ".join(str(exc).split()))[:500], delay)
                    fired = None
                if fired is not None:
                    yield TriggerEvent(fired)
                await asyncio.sleep(delay)
        finally:
            reader.reset()


class _Reader:
    """The blocking side, run in a thread: the pipeline's config (reloaded when its file changes),
    its Kafka admin client and ledger kept open between polls, and the ``LagWatch``."""

    def __init__(self, config_path: str, log: Any) -> None:
        self.path = Path(config_path)
        self.log = log
        self.name = self.path.stem
        self.pipeline = None
        self.mtime: float | None = None
        self.kafka = None
        self.ledger = None
        self.watch = None

    def reset(self) -> None:
        """Close the connections; the next poll opens them again (after an error, or at the end)."""
        for close in (self.kafka and self.kafka.close, self.ledger and self.ledger.dispose):
            if close:
                try:
                    close()
                except Exception:  # noqa: BLE001 - already broken
                    pass
        self.kafka = self.ledger = None

    def _load(self) -> bool:
        from offsetbatch.pipeline import Pipeline
        from offsetbatch.plan.freshness import LagWatch

        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            if self.pipeline is not None or self.mtime is None:
                self.log.warning("pipeline %s: its config %s is gone; the lag trigger fires nothing until it is "
                                 "back (Airflow removes the trigger once the DAG is gone)", self.name, self.path)
            self.pipeline, self.mtime = None, -1.0
            self.reset()
            return False
        if mtime != self.mtime:
            pipeline = Pipeline.load(self.path)
            rule = pipeline.cfg.airflow.trigger
            if rule is None:
                self.log.warning("pipeline %s: %s has no airflow.trigger any more; firing nothing until the DAG "
                                 "is parsed again", pipeline.name, self.path)
                self.pipeline, self.mtime = None, mtime
                return False
            if self.pipeline is not None:
                self.log.info("pipeline %s: config changed; the lag trigger reads it again", pipeline.name)
            self.reset()
            self.pipeline, self.mtime, self.name = pipeline, mtime, pipeline.name
            if self.watch is None or self.watch.rule != rule:
                self.watch = LagWatch(rule)
        return self.pipeline is not None

    def poll(self) -> dict | None:
        """One reading: the event's payload when a run should start, else None."""
        from offsetbatch.ledger.errors import LedgerMissingError
        from offsetbatch.plan.freshness import describe_rule, oldest_age, waiting

        if not self._load():
            return None
        pipeline, watch = self.pipeline, self.watch
        if self.kafka is None:
            self.kafka = pipeline.kafka()
        if self.ledger is None:
            try:
                self.ledger = pipeline.ledger()
            except LedgerMissingError:
                pass  # before the first run: every partition waits from its starting policy
        seen = waiting(pipeline.cfg, self.ledger, self.kafka)
        now = time.monotonic()
        age = None
        if watch.needs_age(seen, now):
            age = oldest_age(self.kafka, seen.starts, time.time() * 1000, watch.ages)
        _emit_metrics(pipeline.name, seen.records, age)
        reason = watch.decide(seen, age, now)
        if reason is None:
            return None
        payload = {"pipeline": pipeline.name, "reason": reason, "waiting_records": seen.records,
                   "partitions": seen.partitions, "oldest_age_s": None if age is None else round(age, 1),
                   "rule": describe_rule(watch.rule)}
        self.log.info("pipeline %s: lag trigger fired (%s): %d records wait in %d partition(s)%s", pipeline.name,
                      reason, seen.records, seen.partitions, "" if age is None else f", the oldest for {age:.0f} s")
        return payload


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


def _emit_metrics(name: str, records: int, age_s: float | None) -> None:
    """The lag through Airflow's own metrics (StatsD or OpenTelemetry, as the installation set)."""
    try:
        from airflow.sdk.observability.stats import Stats
    except ImportError:  # pragma: no cover - older Task SDK
        return
    Stats.gauge(f"offsetbatch.{name}.lag_records", records)
    if age_s is not None:
        Stats.gauge(f"offsetbatch.{name}.lag_seconds", age_s)
