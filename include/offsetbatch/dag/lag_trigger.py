"""``LagTrigger``: the triggerer's watch on one pipeline's waiting records (``airflow.trigger``).

An ``AssetWatcher`` on the pipeline's input asset (``dag.factory``) runs it in the triggerer;
each event it yields is an asset event that queues a run of the pipeline's DAG, which reads
``[frontier, log end)`` capped, through the same plan task as every run (a lag-triggered run has
no logical date). It is the project's own, not the Kafka provider's ``AwaitMessageTrigger``: that
one consumes the topic (a consumer, a group, one event per matching message), where this one
only compares the ledger's frontier with the log ends (``plan.freshness``) and fires once per
crossing. It never raises: the broker or the ledger down, or the pipeline's file gone, it logs
why in the triggerer's log and polls again with backoff, so the DAG never fails for it.

Pipelines on one Kafka connection (same isolation level and poll interval) share one poll of the
cluster (Airflow 3.3's shared streams: ``shared_stream_key``): each poll reads the partitions and
log ends of every topic they read, with the requests one pipeline's poll would make, whatever their
number, and each trigger compares the reading with its own ledger. Only the age rule's record fetch is per
pipeline, and only when the count alone does not decide.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from offsetbatch import redact

# The longest wait between two readings that failed: a broker back after an outage is seen within
# 30 s (minute-level freshness), and a down broker costs one request and one warning per 30 s.
BACKOFF_MAX_S = 30.0
# A shared reading older than this many poll intervals when a trigger gets to it is skipped: a trigger
# that fell behind (a slow ledger) catches up on the newest instead of filling its queue.
STALE_POLLS = 2.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterReading:
    """One shared poll's result: every partition's earliest and latest offset (``offsets``) of
    the topics it ``covered``, or why it could not read them (``error``, with ``retry_in``)."""

    at: float  # time.time() when the reading was done
    covered: Any = None  # plan.freshness.Interest
    offsets: dict | None = None
    error: str | None = None
    retry_in: float = 0.0


# The interests of the triggers subscribed to each shared poll (key -> trigger -> Interest): a poll
# reads the union. One triggerer process, one event loop: no lock needed.
_INTERESTS: dict[Hashable, dict[int, Any]] = {}


class LagTrigger(BaseEventTrigger):
    """Fire when ``min_records`` wait past the pipeline's frontier, or the oldest waiting record
    has waited ``max_delay`` seconds.

    :param config_path: the pipeline's YAML file (read again when it changes)
    :param min_records: records waiting that start a run (None: no count rule)
    :param max_delay: seconds the oldest waiting record may wait (None: no age rule)
    :param poll: seconds between two readings
    """

    def __init__(self, config_path: str, min_records: int | None, max_delay: float | None, poll: float,
                 kafka_conn_id: str | None = None, isolation_level: str = "read_uncommitted") -> None:
        super().__init__()
        self.config_path = config_path
        self.min_records = min_records
        self.max_delay = max_delay
        self.poll = poll
        self.kafka_conn_id = kafka_conn_id
        self.isolation_level = isolation_level

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"config_path": self.config_path, "min_records": self.min_records, "max_delay": self.max_delay,
                 "poll": self.poll, "kafka_conn_id": self.kafka_conn_id, "isolation_level": self.isolation_level})

    def shared_stream_key(self) -> Hashable | None:
        """Triggers on one Kafka connection, isolation level and poll interval share one poll (None
        for a trigger serialized before the connection was part of it: it polls alone)."""
        if self.kafka_conn_id is None:
            return None
        return _shared_key(self.kafka_conn_id, self.isolation_level, self.poll)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Polling alone (no shared key)."""
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
                    self._could_not_read(reader, exc, delay)
                    fired = None
                if fired is not None:
                    yield TriggerEvent(fired)
                await asyncio.sleep(delay)
        finally:
            reader.reset()

    def _could_not_read(self, reader: "_Reader", exc: Exception | str, delay: float) -> None:
        text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        self.log.warning("pipeline %s: lag trigger could not read the waiting records (%s); trying again in %.0f s",
                         reader.name, redact.url(text)[:500], delay)

    @classmethod
    async def open_shared_stream(cls, kwargs: dict[str, Any]) -> AsyncIterator[ClusterReading]:
        """The shared poll: every ``poll`` seconds, the partitions and log ends of every topic the
        subscribed triggers read, or the error (the stream never raises: Airflow would fail every
        subscriber). Backs off like a lone trigger while the cluster does not answer."""
        # imported in a thread: the admin client's imports (kafka-python) block an event loop for 0.13 s
        Interest, KafkaAdmin = await asyncio.to_thread(_stream_classes)  # noqa: N806 - classes
        poll, conn_id, isolation = float(kwargs["poll"]), kwargs["kafka_conn_id"], kwargs["isolation_level"]
        key = _shared_key(conn_id, isolation, poll)
        holder: dict[str, KafkaAdmin] = {}

        def read(interest: Interest) -> dict:
            if "admin" not in holder:
                holder["admin"] = KafkaAdmin.for_connection(conn_id, isolation)
            kafka = holder["admin"]
            names = set(interest.topics) | kafka.topics_matching(interest.patterns)
            tps = kafka.partitions(sorted(names)) if names else set()
            return kafka.offsets(sorted(tps)) if tps else {}

        def close() -> None:
            if "admin" in holder:
                try:
                    holder.pop("admin").close()
                except Exception:  # noqa: BLE001 - already broken
                    pass

        log.info("lag triggers on Kafka connection %s: one shared poll every %s s", conn_id, poll)
        delay, readers = poll, 0
        try:
            while True:
                interests = list(_INTERESTS.get(key, {}).values())
                if len(interests) != readers:
                    readers = len(interests)
                    log.info("lag triggers on Kafka connection %s: the shared poll serves %d pipeline(s)", conn_id,
                             readers)
                covered = Interest.union(interests)
                if not interests:  # nothing to read; the subscribers still look at their configs again
                    yield ClusterReading(time.time(), covered, {})
                else:
                    try:
                        offsets = await asyncio.to_thread(read, covered)
                    except Exception as exc:  # noqa: BLE001 - the subscribers log it, with their pipeline
                        await asyncio.to_thread(close)
                        delay = min(delay * 2, BACKOFF_MAX_S)
                        yield ClusterReading(time.time(), covered, retry_in=delay,
                                             error=f"{type(exc).__name__}: {' '.join(str(exc).split())}")
                    else:
                        delay = poll
                        yield ClusterReading(time.time(), covered, offsets)
                await asyncio.sleep(delay)
        finally:
            await asyncio.to_thread(close)

    async def filter_shared_stream(self, shared_stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        """This pipeline's decision on each shared reading, against its own ledger. After an error
        of its own (its ledger, its config) it lets readings pass by with the same backoff as a lone
        trigger: one attempt and one warning per interval, up to ``BACKOFF_MAX_S``."""
        reader = _Reader(self.config_path, self.log)
        key = self.shared_stream_key()
        self.log.info("pipeline %s: lag trigger watching its waiting records (min_records %s, max_delay %s s, "
                      "poll %s s, shared by the pipelines on Kafka connection %s; config %s)", reader.name,
                      self.min_records, self.max_delay, self.poll, self.kafka_conn_id, self.config_path)
        delay, retry_at = self.poll, 0.0
        try:
            try:  # known before the first reading, so that it already covers this pipeline
                await asyncio.to_thread(reader.load_interest)
            except Exception:  # noqa: BLE001 - the first reading tries again and says why
                pass
            _share(key, id(self), reader.interest)
            async for reading in shared_stream:
                if not isinstance(reading, ClusterReading) or time.time() - reading.at > STALE_POLLS * self.poll:
                    continue  # fell behind: the next reading is newer
                if reading.error is not None:
                    self._could_not_read(reader, reading.error, reading.retry_in)
                    continue
                if time.monotonic() < retry_at:
                    continue  # backing off after an error of this pipeline's own
                try:
                    fired = await asyncio.to_thread(reader.poll, reading)
                    delay = self.poll
                except Exception as exc:  # noqa: BLE001 - as in run: never raise
                    reader.reset()
                    delay = min(delay * 2, BACKOFF_MAX_S)
                    retry_at = time.monotonic() + delay
                    self._could_not_read(reader, exc, delay)
                    fired = None
                _share(key, id(self), reader.interest)  # again: the config or the ledger's topics may change
                if fired is not None:
                    yield TriggerEvent(fired)
        finally:
            _share(key, id(self), None)
            reader.reset()


class _Reader:
    """The blocking side, run in a thread: the pipeline's config (reloaded when its file changes),
    its Kafka admin client and ledger kept open between polls (the ledger's engine shared with the
    other pipelines' triggers on its database), and the ``LagWatch``."""

    def __init__(self, config_path: str, log: Any) -> None:
        self.path = Path(config_path)
        self.log = log
        self.name = self.path.stem
        self.pipeline = None
        self.mtime: float | None = None
        self.kafka = None
        self.ledger = None
        self.watch = None
        self.interest = None  # plan.freshness.Interest: what a shared poll must read for this pipeline
        self.missing: list[str] = []  # its topics (or pattern) the cluster lacked at the last poll

    def reset(self) -> None:
        """Close the connections; the next poll opens them again (after an error, or at the end)."""
        from offsetbatch.ledger import shared

        for close in (self.kafka and self.kafka.close, self.ledger and (lambda: shared.release(self.ledger))):
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
            self.pipeline, self.mtime, self.interest = None, -1.0, None
            self.reset()
            return False
        if mtime != self.mtime:
            pipeline = Pipeline.load(self.path)
            rule = pipeline.cfg.airflow.trigger
            if rule is None:
                self.log.warning("pipeline %s: %s has no airflow.trigger any more; firing nothing until the DAG "
                                 "is parsed again", pipeline.name, self.path)
                self.pipeline, self.mtime, self.interest = None, mtime, None
                return False
            if self.pipeline is not None:
                self.log.info("pipeline %s: config changed; the lag trigger reads it again", pipeline.name)
            self.reset()
            self.pipeline, self.mtime, self.name, self.interest = pipeline, mtime, pipeline.name, None
            if self.watch is None or self.watch.rule != rule:
                self.watch = LagWatch(rule)
        return self.pipeline is not None

    def _open_ledger(self) -> None:
        from offsetbatch.ledger import shared
        from offsetbatch.ledger.errors import LedgerMissingError

        if self.ledger is None:
            try:  # one engine per ledger database for every trigger of the triggerer (ledger.shared)
                self.ledger = shared.acquire(self.pipeline.ledger_url())
            except LedgerMissingError:
                pass  # before the first run: every partition waits from its starting policy

    def load_interest(self) -> None:
        """The topics a shared poll must read for this pipeline (its config's, its ledger's)."""
        from offsetbatch.plan.freshness import Interest, frontier

        if not self._load():
            self.interest = None
            return
        self._open_ledger()
        self.interest = Interest.of(self.pipeline, frontier(self.pipeline, self.ledger))

    def poll(self, reading: ClusterReading | None = None) -> dict | None:
        """One reading (its own, or ``reading`` of the shared poll): the event's payload when a run
        should start, else None."""
        from offsetbatch.plan.freshness import (Interest, describe_rule, frontier, missing_sources, oldest_age, waiting,
                                                waiting_at)

        if not self._load():
            return None
        pipeline, watch = self.pipeline, self.watch
        self._open_ledger()
        if reading is None:
            if self.kafka is None:
                self.kafka = pipeline.kafka()
            seen = waiting(pipeline, self.ledger, self.kafka)
        else:
            rows = frontier(pipeline, self.ledger)
            self.interest = Interest.of(pipeline, rows)
            if not self.interest.within(reading.covered):
                return None  # read before this pipeline's topics joined the shared poll: no decision on it
            seen = waiting_at(pipeline, rows, {tp: po for tp, po in reading.offsets.items()
                                               if self.interest.covers(tp)})
        self._note_missing(missing_sources(pipeline, seen.present))
        now = time.monotonic()
        age = None
        if watch.needs_age(seen, now):
            if self.kafka is None:
                self.kafka = pipeline.kafka()
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


    def _note_missing(self, missing: list[str]) -> None:
        """Topics that do not exist are why a trigger never fires: said once when they go missing
        (or at the first poll), once when they are back, never on every poll."""
        if missing == self.missing:
            return
        cfg = self.pipeline.cfg
        if missing:
            self.log.warning("pipeline %s: lag trigger: %s %s on Kafka connection %s: nothing waits there, so it fires "
                             "no run for them until they exist. Create them, or fix kafka.%s in %s", cfg.name,
                             ", ".join(missing), "does not exist" if len(missing) == 1 else "do not exist",
                             cfg.kafka.conn_id, "pattern" if cfg.kafka.pattern else "topics", cfg.source_file)
        else:
            self.log.info("pipeline %s: lag trigger: %s found again on Kafka connection %s", cfg.name,
                          ", ".join(self.missing), cfg.kafka.conn_id)
        self.missing = missing


def _share(key: Hashable, subscriber: int, interest: Any) -> None:
    """What the shared poll ``key`` must read for ``subscriber`` (None: nothing any more)."""
    if interest is not None:
        _INTERESTS.setdefault(key, {})[subscriber] = interest
    else:
        _INTERESTS.get(key, {}).pop(subscriber, None)


def _stream_classes() -> tuple[type, type]:
    from offsetbatch.plan.freshness import Interest
    from offsetbatch.source.admin import KafkaAdmin

    return Interest, KafkaAdmin


def _shared_key(kafka_conn_id: str, isolation_level: str, poll: float) -> Hashable:
    return ("offsetbatch.lag", kafka_conn_id, isolation_level, float(poll))




def _emit_metrics(name: str, records: int, age_s: float | None) -> None:
    """The lag through Airflow's own metrics (StatsD or OpenTelemetry, as the installation set).

    Through airflow-core's ``Stats``, which the triggerer configures when it starts: the Task SDK's
    (``airflow.sdk.observability.stats``) is a separate copy that only task processes configure,
    and in the triggerer it would drop every gauge (its ``NoStatsLogger``)."""
    try:
        from airflow.observability.stats import Stats
    except ImportError:  # a process without airflow-core (a Task SDK worker): the SDK's copy
        try:
            from airflow.sdk.observability.stats import Stats
        except ImportError:  # pragma: no cover - older Task SDK
            return
    Stats.gauge(f"offsetbatch.{name}.lag_records", records)
    if age_s is not None:
        Stats.gauge(f"offsetbatch.{name}.lag_seconds", age_s)
