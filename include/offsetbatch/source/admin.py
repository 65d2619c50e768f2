"""What the planner and commit ask of Kafka: partitions, earliest/latest/time offsets, and the
consumer-group offsets that publish progress to standard lag tools.

Every offset question is one batched ``ListOffsets`` per leader broker (kafka-python's admin
``list_partition_offsets``), never one call per partition (docs/architecture.md, Performance principles).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

from kafka import TopicPartition as KafkaTP
from kafka.admin import OffsetSpec, OffsetTimestamp
from kafka.errors import KafkaError
from kafka.protocol.consumer.offsets import IsolationLevel
from kafka.structs import OffsetAndMetadata, OffsetAndTimestamp

from offsetbatch.model import TopicPartition
from offsetbatch.source.connection import KafkaClientConfig, from_connection, from_settings
from offsetbatch.source.diagnosis import KafkaAuthError, connect_admin, explain

log = logging.getLogger(__name__)
TOPIC_AUTHORIZATION_FAILED = 29  # Kafka protocol error code
SOURCE_ACLS = "The pipeline's user needs DESCRIBE and READ on its topics and READ on its consumer group"
SINK_ACLS = ("A Kafka sink's user needs DESCRIBE and WRITE on the output (and dead-letter) topics, READ on the "
             "output topic (the transaction commits the marker's offset on it), WRITE on the transactional id and "
             "DESCRIBE and READ on the marker group")
# kafka-python logs every connection at INFO; operators want one line per batch, not per socket.
if not os.environ.get("OFFSETBATCH_KAFKA_DEBUG"):
    logging.getLogger("kafka").setLevel(logging.WARNING)


@dataclass(frozen=True)
class PartitionOffsets:
    earliest: int
    latest: int
    cut: int | None = None  # first offset with timestamp >= the asked time; None when not asked
    cut_timestamp_ms: int | None = None  # the timestamp of the record at ``cut``; None at the log end


def _cut(found: OffsetAndTimestamp, log_end: int) -> tuple[int, int | None]:
    """(offset, its record's timestamp) of a timestamp lookup; no record at or after that time yet
    (offset -1 or None) is the log end."""
    if found.offset is None or found.offset < 0:
        return log_end, None
    return found.offset, (found.timestamp if found.timestamp is not None and found.timestamp >= 0 else None)


class KafkaAdmin:
    """A short-lived admin connection to one cluster, with the settings of a Kafka connection
    (``offsetbatch.source.connection``; a plain bootstrap string means PLAINTEXT, for dev tools).
    Failing to connect raises ``KafkaUnreachableError`` (retriable) or ``KafkaAuthError`` (not),
    naming the connection, the broker and the likely fix."""

    def __init__(self, client: KafkaClientConfig | str, isolation_level: str = "read_uncommitted"):
        self.client = client if isinstance(client, KafkaClientConfig) else from_settings(
            "(bootstrap)", {"bootstrap.servers": client})
        self.bootstrap = self.client.bootstrap
        self.isolation = IsolationLevel.READ_COMMITTED if isolation_level == "read_committed" else IsolationLevel.READ_UNCOMMITTED
        self.admin = connect_admin(self.client)
        self._cluster_id: str | None = None

    @classmethod
    def for_connection(cls, conn_id: str, isolation_level: str = "read_uncommitted") -> "KafkaAdmin":
        return cls(from_connection(conn_id), isolation_level)

    def close(self) -> None:
        self.admin.close()

    def __enter__(self) -> "KafkaAdmin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def partitions(self, topics: list[str] | None = None, pattern: str | None = None,
                   needs: str = SOURCE_ACLS) -> set[TopicPartition]:
        """Partitions of the named topics (missing topics are simply absent) or of every
        non-internal topic matching ``pattern`` (full match). ``needs``: the ACLs a denial names."""
        if pattern is not None:
            topics = sorted(self.topics_matching([pattern]))
        if not topics:
            return set()
        found: set[TopicPartition] = set()
        descs = self.admin.describe_topics(list(topics))
        denied = sorted(d["name"] for d in descs if d.get("error_code") == TOPIC_AUTHORIZATION_FAILED)
        if denied:
            raise KafkaAuthError(
                f"Kafka {self.client.describe()}: the broker denied describing topic(s) {', '.join(denied)} "
                f"(TOPIC_AUTHORIZATION_FAILED). {needs}; ask the cluster's admins for these ACLs. Nothing was changed.")
        for desc in descs:
            if desc.get("error_code", 0) != 0:
                continue  # unknown topic: the planner decides whether that is an error
            for p in desc["partitions"]:
                found.add(TopicPartition(desc["name"], p["partition_index"]))
        return found

    def topics_matching(self, patterns: Iterable[str]) -> set[str]:
        """The non-internal topics whose name fully matches any of ``patterns`` (one metadata request)."""
        rxs = [re.compile(p) for p in patterns]
        if not rxs:
            return set()
        return {t for t in self.admin.list_topics() if not t.startswith("__") and any(rx.fullmatch(t) for rx in rxs)}

    def _list(self, specs: dict[KafkaTP, object]) -> dict[TopicPartition, int]:
        return {tp: v.offset for tp, v in self._list_with_timestamps(specs).items()}

    def _list_with_timestamps(self, specs: dict[KafkaTP, object]) -> dict[TopicPartition, OffsetAndTimestamp]:
        if not specs:
            return {}
        res = self.admin.list_partition_offsets(specs, isolation_level=self.isolation)
        return {TopicPartition(tp.topic, tp.partition): v for tp, v in res.items()}

    def cluster_id(self) -> str:
        """The cluster's id (KRaft's, or ZooKeeper's): two connections reach one cluster when equal."""
        if self._cluster_id is None:
            self._cluster_id = self.admin.describe_cluster()["cluster_id"]
        return self._cluster_id

    def offsets(self, tps: set[TopicPartition] | list[TopicPartition], cut_timestamp_ms: int | None = None) -> dict[TopicPartition, PartitionOffsets]:
        """Earliest, latest and (optionally) the time cut of each partition, in 2–3 batched requests."""
        ktps = [KafkaTP(tp.topic, tp.partition) for tp in tps]
        earliest = self._list({tp: OffsetSpec.EARLIEST for tp in ktps})
        latest = self._list({tp: OffsetSpec.LATEST for tp in ktps})
        if cut_timestamp_ms is None:
            return {tp: PartitionOffsets(earliest[tp], latest[tp]) for tp in earliest}
        found = self._list_with_timestamps({tp: OffsetTimestamp(cut_timestamp_ms) for tp in ktps})
        return {tp: PartitionOffsets(earliest[tp], latest[tp], *_cut(found[tp], latest[tp])) for tp in earliest}

    def _time_cut(self, ktps: list[KafkaTP], timestamp_ms: int, latest: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        found = self._list_with_timestamps({tp: OffsetTimestamp(timestamp_ms) for tp in ktps})
        return {tp: _cut(v, latest[tp])[0] for tp, v in found.items()}

    def offsets_for_time(self, tps, timestamp_ms: int) -> dict[TopicPartition, int]:
        """First offset with timestamp >= ``timestamp_ms``, else the log end (two batched requests)."""
        ktps = [KafkaTP(tp.topic, tp.partition) for tp in tps]
        return self._time_cut(ktps, timestamp_ms, self._list({tp: OffsetSpec.LATEST for tp in ktps}))

    def timestamps_at(self, positions: dict[TopicPartition, int], timeout_s: float = 10.0) -> dict[TopicPartition, int]:
        """Record timestamp (ms) at each given offset, fetched in one consumer pass; partitions
        whose offset is at the log end are left out."""
        from kafka import KafkaConsumer

        if not positions:
            return {}
        consumer = KafkaConsumer(**{"client_id": "offsetbatch-status", **self.client.kafka_python()},
                                 enable_auto_commit=False, group_id=None, max_poll_records=500)
        try:
            ktps = {KafkaTP(tp.topic, tp.partition): tp for tp in positions}
            consumer.assign(list(ktps))
            for ktp, tp in ktps.items():
                consumer.seek(ktp, positions[tp])
            found: dict[TopicPartition, int] = {}
            deadline = time.monotonic() + timeout_s
            while len(found) < len(ktps) and time.monotonic() < deadline:
                for ktp, records in consumer.poll(timeout_ms=500).items():
                    tp = ktps[ktp]
                    if tp not in found and records:
                        found[tp] = records[0].timestamp
                        consumer.pause(ktp)
            return found
        finally:
            consumer.close()

    def check_access(self, tps: set[TopicPartition], group_id: str) -> None:
        """What a pipeline's user needs beyond DESCRIBE, checked without changing anything: READ on
        its topics (the operations the broker says this user may do on them), the group's committed
        offsets (DESCRIBE on the group) and, once it has some, the same offsets committed again
        unchanged (READ on the group). Raises ``KafkaAuthError`` naming the ACL."""
        from kafka import errors as kerr

        topics = sorted({tp.topic for tp in tps})
        if topics:
            descs = self.admin.describe_topics(topics)
            # None: the broker has no authorizer (everything allowed) or does not report operations
            unreadable = sorted(d["name"] for d in descs
                                if d.get("authorized_operations") is not None and "READ" not in d["authorized_operations"])
            if unreadable:
                raise KafkaAuthError(
                    f"Kafka {self.client.describe()}: may describe but not read topic(s) {', '.join(unreadable)}. "
                    f"The pipeline's user needs READ on its topics (the Spark job fetches them); ask the cluster's "
                    f"admins for that ACL.")
        try:
            committed = self.group_offsets(group_id)
            if committed:  # committing them unchanged needs READ on the group, as the commit task does
                self.commit_group(group_id, committed)
        except kerr.AuthorizationError as exc:
            raise explain(exc, self.client, doing=f"read and commit consumer group {group_id} (READ ACL)") from exc

    def check_produce_access(self, topics: list[str], group_id: str, transactional_id: str,
                             marker_topic: str | None = None) -> None:
        """What a transactional producer needs, checked without producing anything: WRITE on each
        topic and READ on ``marker_topic`` (a transaction's offset commit needs it; the operations
        the broker reports for this user), DESCRIBE (and, once the group has offsets, READ) on the
        marker group, and the transactional id (the broker's coordinator lookup refuses an id this
        user has no ACL on). Every missing ACL is named in one ``KafkaAuthError``. Not checkable
        without side effects, so left to the publish itself: READ on a group that has no offsets
        yet, and WRITE where only DESCRIBE was granted on the id."""
        from kafka import errors as kerr

        missing: list[str] = []
        for desc in self.admin.describe_topics(list(topics)):
            needed = ["READ", "WRITE"] if desc["name"] == marker_topic else ["WRITE"]
            ops = desc.get("authorized_operations")  # None: no authorizer, or not reported
            if desc.get("error_code") == TOPIC_AUTHORIZATION_FAILED:
                missing.append(f"{', '.join(['DESCRIBE', *needed[:-1]])} and {needed[-1]} on topic {desc['name']}")
            elif not desc.get("error_code") and ops is not None and [op for op in needed if op not in ops]:
                # (a topic that does not exist is the caller's to name)
                missing.append(f"{' and '.join(op for op in needed if op not in ops)} on topic {desc['name']}")
        try:
            group = self.admin.describe_groups([group_id]).get(group_id) or {}
            ops = group.get("authorized_operations")
            if ops is not None and "READ" not in ops:
                missing.append(f"READ on group {group_id}")
        except kerr.GroupAuthorizationFailedError:
            missing.append(f"DESCRIBE and READ on group {group_id}")
        except KafkaError:
            pass  # coordinator not there yet: the lookup passed the ACL check, or the publish will say
        try:
            self.admin.describe_transactions([transactional_id])
        except kerr.TransactionalIdAuthorizationFailedError:
            missing.append(f"WRITE on transactional id {transactional_id}")
        except KafkaError:
            pass  # unknown id or coordinator loading: the ACL check passed
        if missing:
            user = self.client.settings.get("sasl.username")
            raise KafkaAuthError(
                f"Kafka {self.client.describe()}: user {user or 'this client'!r} may not publish: it lacks "
                f"{'; '.join(missing)}. {SINK_ACLS}; ask the cluster's admins for these ACLs (the ids and group "
                f"start with 'offsetbatch.', so prefixed ACLs cover every pipeline).")

    def topic_config(self, topics: list[str], key: str) -> dict[str, str | None]:
        """``key``'s effective value on each of ``topics`` (the broker's default where the topic sets
        none); ``None`` where the broker reported nothing: a user without DESCRIBE_CONFIGS on the
        topic (kafka-python drops the per-topic error), or a topic the broker has just created."""
        from kafka.admin import ConfigResource, ConfigResourceType

        found = self._retry(f"describing {key} of {', '.join(topics)}", lambda: self.admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t, [key]) for t in topics], config_filter="all"))
        by_topic = found.get("topic", {})
        return {t: (by_topic.get(t, {}).get(key) or {}).get("value") for t in topics}

    def _retry(self, what: str, call, timeout_s: float = 30.0):
        """Retry retriable errors (the group coordinator is created on first use)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return call()
            except KafkaError as exc:
                if not getattr(exc, "retriable", False) or time.monotonic() > deadline:
                    raise
                log.info("%s: %s; retrying", what, exc)
                time.sleep(0.5)

    def commit_group(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """Publish ``offsets`` as the group's committed offsets (the group must have no members)."""
        specs = {KafkaTP(tp.topic, tp.partition): OffsetAndMetadata(o, "offsetbatch", -1) for tp, o in offsets.items()}
        self._retry(f"committing group {group_id}", lambda: self.admin.alter_group_offsets(group_id, specs))

    def group_marker(self, group_id: str, tp: TopicPartition) -> tuple[int, str] | None:
        """(offset, metadata) the group has committed on ``tp``, or ``None`` (the kafka sink's marker)."""
        spec = {group_id: [KafkaTP(tp.topic, tp.partition)]}
        res = self._retry(f"reading group {group_id}", lambda: self.admin.list_group_offsets(spec))
        offs = res.get(group_id, res) if isinstance(res, dict) else res
        om = offs.get(KafkaTP(tp.topic, tp.partition))
        return None if om is None or om.offset is None or om.offset < 0 else (om.offset, om.metadata or "")

    def group_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        res = self._retry(f"reading group {group_id}", lambda: self.admin.list_group_offsets({group_id: None}))
        offs = res.get(group_id, res) if isinstance(res, dict) else res
        return {TopicPartition(tp.topic, tp.partition): om.offset for tp, om in offs.items() if om.offset >= 0}
