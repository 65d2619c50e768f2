"""Produce sample click/purchase events: JSON, one unique ``event_id`` each, record timestamps
spread over simulated hours, and a chosen fraction of malformed records (bad JSON or schema
mismatches) so the rejected path is exercised too.

    python -m offsetbatch_dev.sample.producer --records 20000 --hours 3

Defaults fit the sample pipeline (include/pipelines/sample_events.yaml) on the local broker: topic
``sample-events``, bootstrap ``127.0.0.1:$KAFKA_PORT`` (9092 unless ``scripts/env.sh`` was given
another port).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewPartitions, NewTopic
from kafka.errors import TopicAlreadyExistsError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

PAGES = ["/", "/search", "/product/1", "/product/2", "/cart", "/checkout"]
MALFORMED = [
    b"{not json",  # broken JSON
    b'{"event_id": "x", "kind": "click"',  # truncated
    b"\xff\xfe binary garbage",  # not UTF-8
]


@dataclass
class ProduceResult:
    """What was produced, for exactly-once checks: valid ids and malformed (partition, offset)s."""

    valid_ids: set[str] = field(default_factory=set)
    malformed: list[tuple[int, int]] = field(default_factory=list)
    by_hour: dict[str, int] = field(default_factory=dict)
    offsets: dict[tuple[int, int], str | None] = field(default_factory=dict)  # (partition, offset) -> id

    @property
    def total(self) -> int:
        return len(self.valid_ids) + len(self.malformed)


def ensure_topic(
    bootstrap: str, topic: str, partitions: int, *, client_kwargs: dict | None = None, **configs: str
) -> None:
    """Create the topic, or grow it to ``partitions`` if it has fewer. ``client_kwargs`` are extra
    kafka-python settings (e.g. SASL_SSL ones from ``KafkaBroker.client_kwargs()``)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **(client_kwargs or {}))
    try:
        try:
            admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs)])
        except TopicAlreadyExistsError:
            have = len(admin.describe_topics([topic])[0]["partitions"])
            if have < partitions:
                admin.create_partitions({topic: NewPartitions(partitions)})
    finally:
        admin.close()


def make_event(rng: random.Random, seq: int, ts: datetime, id_prefix: str) -> dict:
    kind = "purchase" if rng.random() < 0.1 else "click"
    event = {
        "event_id": f"{id_prefix}{seq:09d}",
        "kind": kind,
        "user_id": rng.randint(1, 5000),
        "page": rng.choice(PAGES),
        "event_time": ts.isoformat(),
    }
    if kind == "purchase":
        event["amount"] = round(rng.uniform(1, 500), 2)
    return event


def produce(
    bootstrap: str,
    topic: str,
    records: int,
    *,
    partitions: int = 4,
    start: datetime | None = None,
    hours: int = 1,
    malformed_fraction: float = 0.01,
    seed: int = 7,
    id_prefix: str = "e",
    progress: bool = True,
    client_kwargs: dict | None = None,
    encoder: Callable[[dict], tuple[bytes, list[tuple[str, bytes]]]] | None = None,
    malformed_values: list[bytes] | None = None,
) -> ProduceResult:
    """Produce ``records`` events spread evenly over ``hours`` simulated hours from ``start``.

    Kafka timestamps (CreateTime) are the simulated event times, so hourly runs cut by
    ``data_interval_end`` find each hour's records. ``client_kwargs`` are extra kafka-python
    settings for the admin client and the producer (security: SASL_SSL, SCRAM, CA file).
    ``encoder``: an event's value bytes and headers (default: JSON, no headers; Avro:
    ``sample.avro_events``); ``malformed_values``: the bad values to mix in (default ``MALFORMED``)."""
    ensure_topic(bootstrap, topic, partitions, client_kwargs=client_kwargs)
    start = start or datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) - timedelta(hours=hours)
    rng = random.Random(seed)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20, batch_size=256 * 1024,
                             **(client_kwargs or {}))
    result = ProduceResult()
    step = timedelta(hours=hours) / max(records, 1)
    futures = []
    columns = [TextColumn(f"producing to {topic}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
    with Progress(*columns, disable=not progress, transient=False) as bar:
        task = bar.add_task("produce", total=records)
        for seq in range(records):
            ts = start + step * seq
            partition = seq % partitions
            ts_ms = int(ts.timestamp() * 1000)
            if rng.random() < malformed_fraction:
                value = rng.choice(malformed_values or MALFORMED)
                futures.append((partition, None, producer.send(topic, value=value, partition=partition, timestamp_ms=ts_ms)))
            else:
                event = make_event(rng, seq, ts, id_prefix)
                value, headers = encoder(event) if encoder else (json.dumps(event).encode(), [])
                key = str(event["user_id"]).encode()
                futures.append((partition, event["event_id"], producer.send(
                    topic, key=key, value=value, headers=headers or None, partition=partition, timestamp_ms=ts_ms)))
            hour = ts.strftime("%Y-%m-%dT%H:00Z")
            result.by_hour[hour] = result.by_hour.get(hour, 0) + 1
            if seq % 1000 == 999:
                bar.advance(task, 1000)
        producer.flush()
        bar.update(task, completed=records)
    for partition, event_id, fut in futures:
        meta = fut.get(timeout=30)
        result.offsets[(partition, meta.offset)] = event_id
        if event_id is None:
            result.malformed.append((partition, meta.offset))
        else:
            result.valid_ids.add(event_id)
    producer.close()
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bootstrap", default=f"127.0.0.1:{os.environ.get('KAFKA_PORT') or 9092}",
                   help="Kafka bootstrap servers (default: the local broker on $KAFKA_PORT, else 9092)")
    p.add_argument("--topic", default="sample-events", help="default: the sample pipeline's topic")
    p.add_argument("--records", type=int, default=20_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--hours", type=int, default=3)
    p.add_argument("--start", help="ISO timestamp of the first simulated hour (UTC); default: HOURS ago")
    p.add_argument("--malformed-fraction", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args(argv)
    start = datetime.fromisoformat(a.start).astimezone(timezone.utc) if a.start else None
    r = produce(a.bootstrap, a.topic, a.records, partitions=a.partitions, start=start, hours=a.hours,
                malformed_fraction=a.malformed_fraction, seed=a.seed)
    print(f"produced {r.total} records to {a.topic} ({len(r.valid_ids)} valid, {len(r.malformed)} malformed) over {len(r.by_hour)} hours")
    return 0


if __name__ == "__main__":
    sys.exit(main())
