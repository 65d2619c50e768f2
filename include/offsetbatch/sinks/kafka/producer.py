"""The Kafka sink's publish transaction on librdkafka (confluent-kafka's ``Producer``).

A batch is published in one transaction of up to millions of records. kafka-python encodes every
record and header in Python inside ``send()`` (11,451 records/s here, docs/benchmarks.md);
librdkafka does it in C, so the per-record cost left in Python is one ``produce()`` call.
kafka-python stays for the admin questions (planning, the marker read, the ACL checks).

The connection's ``extra`` already uses librdkafka's key names (the Airflow Kafka provider's
vocabulary), so ``KafkaClientConfig.librdkafka()`` passes it through. ``partitioner`` is
``murmur2_random``, the Java client's hash (librdkafka's default is CRC32), so ``partitioning: key``
puts a key where a Java producer would.

Failures are sorted for the task: a refused ACL is ``ProducerRefusedError`` (no retry helps), any
other error is ``PublishFailedError`` (a retry may help; the transaction is aborted first when
librdkafka says it must be).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

if TYPE_CHECKING:
    from offsetbatch.source.connection import KafkaClientConfig

log = logging.getLogger(__name__)

TIMEOUT_S = 120.0  # each transactional call; the broker's transaction timeout bounds the whole
POLL_EVERY = 10_000  # serve delivery reports this often, so the local queue drains as it fills
AUTH_CODES = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
                        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED})
Header = tuple[str, bytes]


class PublishFailedError(RuntimeError):
    """A publish step failed in a way a later attempt may not (a broker down, a timeout)."""


class ProducerRefusedError(PublishFailedError):
    """The broker refused this user an operation the publish needs (an ACL)."""


# What every publish producer is, whatever the pipeline sets: the transaction and the Java client's hash.
FIXED = {"enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random"}


def check_settings(settings: dict[str, str | int]) -> None:
    """Raise ``ValueError`` with librdkafka's own words if it refuses ``settings`` for a publish
    producer (a value out of range, a combination it rejects). librdkafka checks a configuration
    when a client is made, without connecting: here no broker is named, so nothing is reached."""
    try:
        producer = Producer({**settings, **FIXED, "transactional.id": "offsetbatch.settings-check", "log_level": 0})
    except KafkaException as exc:
        err: KafkaError = exc.args[0]
        raise ValueError(f"librdkafka refuses these producer settings: {err.str().strip()}") from None
    del producer


class TransactionalProducer:
    """One transactional producer for one batch's publish: ``init_transactions`` (fences an older
    producer with the same id and aborts its open transaction), ``begin``, ``produce`` the records,
    then ``commit_with_offset`` (the marker's offset and the records commit together)."""

    def __init__(self, client: "KafkaClientConfig", transactional_id: str, settings: dict[str, str | int]):
        self.client = client
        self.transactional_id = transactional_id
        self._producer = Producer({**client.librdkafka(), **settings, **FIXED, "transactional.id": transactional_id,
                                   "logger": log})
        self._open = False

    def _call(self, what: str, fn, *args):
        try:
            return fn(*args)
        except KafkaException as exc:
            self._failed(what, exc)

    def _failed(self, what: str, exc: KafkaException) -> None:
        """Raise ``exc`` as the error the task acts on (aborting the transaction if it must be)."""
        err: KafkaError = exc.args[0]
        text = f"{what}: {err.name()}: {err.str()}"
        if err.code() in AUTH_CODES:
            raise ProducerRefusedError(text) from exc
        if self._open and err.txn_requires_abort():
            self.abort()
        raise PublishFailedError(text + (" (librdkafka: fatal)" if err.fatal() else "")) from exc

    def init_transactions(self) -> None:
        self._call("init_transactions", self._producer.init_transactions, TIMEOUT_S)

    def begin(self) -> None:
        self._call("begin_transaction", self._producer.begin_transaction)
        self._open = True

    def partitions(self, topic: str) -> list[int]:
        """The topic's partition ids as the producer sees them (none: no such topic, or no DESCRIBE)."""
        found = self._call(f"metadata of {topic}", self._producer.list_topics, topic, 30.0).topics.get(topic)
        return [] if found is None or found.error is not None else sorted(found.partitions)

    def produce(self, topic: str, records: Iterable[tuple[bytes | None, bytes | None, list[Header], int]]) -> int:
        """Queue ``(value, key, headers, partition)`` records (partition -1: the partitioner's
        choice); returns how many. A full local queue waits for deliveries, it never drops."""
        produce, poll = self._producer.produce, self._producer.poll
        n = 0
        for value, key, headers, partition in records:
            while True:
                try:
                    produce(topic, value, key, partition, headers=headers)
                    break
                except BufferError:
                    poll(0.5)
                except KafkaException as exc:
                    self._failed(f"produce to {topic}", exc)
            n += 1
            if n % POLL_EVERY == 0:
                poll(0)
        return n

    def flush(self) -> None:
        left = self._producer.flush(TIMEOUT_S)
        if left:
            raise PublishFailedError(f"flush: {left} record(s) still undelivered after {TIMEOUT_S:.0f}s")

    def commit_with_offset(self, topic: str, partition: int, offset: int, metadata: str, group_id: str) -> None:
        """Commit ``offset`` (with ``metadata``) as ``group_id``'s position on ``topic/partition``
        inside the open transaction, then commit the transaction: both or neither."""
        consumer = Consumer({**self.client.librdkafka(), "group.id": group_id, "enable.auto.commit": False,
                             "logger": log})
        try:
            self._call(f"send_offsets_to_transaction (group {group_id})", self._producer.send_offsets_to_transaction,
                       [TopicPartition(topic, partition, offset, metadata)], consumer.consumer_group_metadata(),
                       TIMEOUT_S)
        finally:
            consumer.close()
        self._call("commit_transaction", self._producer.commit_transaction, TIMEOUT_S)
        self._open = False

    def abort(self) -> None:
        """Abort the open transaction if there is one (best effort: the next ``init_transactions``
        or the broker's transaction timeout aborts it otherwise)."""
        if not self._open:
            return
        self._open = False
        try:
            self._producer.abort_transaction(30.0)
        except KafkaException as exc:
            log.warning("aborting transaction of %s: %s", self.transactional_id, exc)

    def close(self) -> None:
        self.abort()
        self._producer.flush(0)
