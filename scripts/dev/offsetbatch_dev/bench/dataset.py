"""The benchmark data set: N JSON records of about 200 bytes over P partitions, produced once and
reused (a topic that already holds exactly N records is not produced again). ``encode`` writes the
same events in another format (``bench.avro_dataset``: Confluent-framed Avro)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from kafka import KafkaProducer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from offsetbatch.model import TopicPartition
from offsetbatch.source.admin import KafkaAdmin
from offsetbatch.source.connection import KafkaClientConfig
from offsetbatch_dev.sample.producer import PAGES, ensure_topic

START = datetime(2026, 11, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Dataset:
    topic: str
    partitions: int
    records: int
    bytes: int  # value bytes, as produced (Kafka adds headers per record on disk)

    @property
    def ranges(self) -> dict[TopicPartition, tuple[int, int]]:
        per = self.records // self.partitions
        return {TopicPartition(self.topic, p): (0, per + (1 if p < self.records % self.partitions else 0))
                for p in range(self.partitions)}


def event(rng: random.Random, seq: int, ts: datetime) -> dict:
    """Event ``seq`` at ``ts``; ``event_time`` is the datetime (each format writes it its way)."""
    kind = "purchase" if rng.random() < 0.1 else "click"
    event = {"event_id": f"b{seq:010d}", "kind": kind, "user_id": rng.randint(1, 50_000), "page": rng.choice(PAGES),
             "event_time": ts, "session": f"{rng.getrandbits(64):016x}",
             "agent": "Mozilla/5.0 (X11; Linux x86_64) bench"}
    if kind == "purchase":
        event["amount"] = round(rng.uniform(1, 500), 2)
    return event


def json_value(event: dict) -> bytes:
    """The JSON data set's value: compact, ``event_time`` in ISO 8601."""
    return json.dumps({**event, "event_time": event["event_time"].isoformat()}, separators=(",", ":")).encode()


def _value(rng: random.Random, seq: int, ts: datetime, encode: Callable[[dict], bytes] = json_value) -> bytes:
    return encode(event(rng, seq, ts))


def ensure_dataset(bootstrap: str, topic: str, records: int, partitions: int,
                   client: KafkaClientConfig | None = None, encode: Callable[[dict], bytes] = json_value) -> Dataset:
    """Produce the data set unless the topic already holds it; one simulated day of timestamps.
    ``client``: the settings of a secured broker (the same records, seeded alike, on any broker);
    ``encode``: an event's value bytes (default JSON)."""
    kwargs = {k: v for k, v in client.kafka_python().items() if k != "bootstrap_servers"} if client else {}
    ensure_topic(bootstrap, topic, partitions, client_kwargs=kwargs)
    with KafkaAdmin(client or bootstrap) as kafka:
        tps = {TopicPartition(topic, p) for p in range(partitions)}
        have = sum(po.latest - po.earliest for po in kafka.offsets(tps).values())
    sample = sum(len(_value(random.Random(i), i, START, encode)) for i in range(1000)) / 1000
    if have == records:
        return Dataset(topic, partitions, records, int(sample * records))
    if have:
        raise RuntimeError(f"topic {topic} holds {have} records, not {records}: delete it "
                           f"('offsetbatch-stack kafka wipe') or use --topic with another name")
    rng = random.Random(42)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=50, batch_size=1024 * 1024, **kwargs)
    step = timedelta(days=1) / records
    size = 0
    columns = [TextColumn(f"producing {records:,} records to {topic}"), BarColumn(), MofNCompleteColumn(),
               TimeRemainingColumn()]
    with Progress(*columns) as bar:
        task = bar.add_task("produce", total=records)
        for seq in range(records):
            ts = START + step * seq
            value = _value(rng, seq, ts, encode)
            size += len(value)
            producer.send(topic, value=value, partition=seq % partitions, timestamp_ms=int(ts.timestamp() * 1000))
            if seq % 10_000 == 9_999:
                bar.advance(task, 10_000)
        producer.flush()
        bar.update(task, completed=records)
    producer.close()
    return Dataset(topic, partitions, records, size)
