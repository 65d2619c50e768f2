"""The sample events in Avro, written exactly as production producers write them: confluent-kafka's
own ``AvroSerializer`` against a schema registry (it registers the schema under ``<topic>-value``
and frames each value), in the prefix form (``0x00`` + schema id) or the header form (a
``__value_schema_id`` header with the schema's GUID, the value unframed).

Two versions of the event schema: ``EVENT_V2`` adds an optional ``referrer``, the kind of change a
registry in BACKWARD mode accepts. Feed ``AvroEvents(...)`` to ``sample.producer.produce`` as its
``encoder``, with ``MALFORMED`` as its malformed values.
"""

from __future__ import annotations

import json
import struct
from datetime import datetime

FIELDS_V1 = [
    {"name": "event_id", "type": "string"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["click", "purchase"]}},
    {"name": "user_id", "type": "int"},
    {"name": "page", "type": "string"},
    {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "amount", "type": ["null", "double"], "default": None},
]
EVENT_V1 = json.dumps({"type": "record", "name": "Event", "namespace": "offsetbatch.sample", "fields": FIELDS_V1})
EVENT_V2 = json.dumps({"type": "record", "name": "Event", "namespace": "offsetbatch.sample",
                       "fields": [*FIELDS_V1, {"name": "referrer", "type": ["null", "string"], "default": None}]})
UNKNOWN_ID = 999_999
# Values a Confluent deserializer refuses: not framed, framed with an id no registry has, framed but
# the body is not the schema's.
MALFORMED = [
    b"{not avro, not framed",
    b"\x00" + struct.pack(">I", UNKNOWN_ID) + b"\x02x",
    b"\x00\x00\x00\x00\x01\xff\xff\xff\xff",
]


def referrer_of(event: dict) -> str | None:
    """The ``referrer`` a v2 event carries (None for purchases: the optional field is both)."""
    return f"ref{event['page']}" if event["kind"] == "click" else None


class AvroEvents:
    """An ``encoder`` for ``sample.producer.produce``: the event as Avro, framed by confluent-kafka's
    serializer (``form`` "prefix" or "header"), with schema ``EVENT_V1`` or ``EVENT_V2``."""

    def __init__(self, registry_url: str, topic: str, schema: str = EVENT_V1, form: str = "prefix") -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient, header_schema_id_serializer
        from confluent_kafka.schema_registry.avro import AvroSerializer

        self.topic = topic
        self.client = SchemaRegistryClient({"url": registry_url})
        conf = {"schema.id.serializer": header_schema_id_serializer} if form == "header" else {}
        self.serializer = AvroSerializer(self.client, schema, conf=conf)
        self.with_referrer = "referrer" in schema

    def __call__(self, event: dict) -> tuple[bytes, list[tuple[str, bytes]]]:
        from confluent_kafka.serialization import MessageField, SerializationContext

        record = {**event, "event_time": datetime.fromisoformat(event["event_time"]),
                  "amount": event.get("amount")}
        if self.with_referrer:
            record["referrer"] = referrer_of(event)
        headers: list[tuple[str, bytes]] = []
        value = self.serializer(record, SerializationContext(self.topic, MessageField.VALUE, headers))
        return value, headers
