"""The sample events in Protobuf, framed as Confluent's Protobuf serializer frames them: the schema's
``.proto`` text registered under ``<topic>-value`` (the form a registry serves), each value ``0x00`` +
schema id + message indexes (``0x00``: the first message) + the message, or in the header form a
``__value_schema_id`` header with the schema's GUID and the message indexes, the value the bare
message (as confluent-kafka 2.16.1's ``SchemaId.guid_to_bytes`` writes them).

Two versions of the event schema: ``EVENT_V2`` adds an optional ``referrer`` (what a registry in
BACKWARD mode accepts). Feed ``ProtobufEvents(...)`` to ``sample.producer.produce`` as its
``encoder``, with ``MALFORMED`` as its malformed values. Messages are built by the protobuf runtime
from the schema compiled by protoc (grpcio-tools), not by offsetbatch's decoder.
"""

from __future__ import annotations

import struct
from datetime import datetime

EVENT_V1 = """syntax = "proto3";
package offsetbatch.sample;

import "google/protobuf/timestamp.proto";

message Event {
  enum Kind {
    unknown = 0;
    click = 1;
    purchase = 2;
  }
  string event_id = 1;
  Kind kind = 2;
  int32 user_id = 3;
  string page = 4;
  google.protobuf.Timestamp event_time = 5;
  optional double amount = 6;
}
"""
EVENT_V2 = EVENT_V1.replace("  optional double amount = 6;\n", "  optional double amount = 6;\n  optional string referrer = 7;\n")
UNKNOWN_ID = 999_999
# Values a Confluent deserializer refuses: not framed; framed with an id no registry has; framed, index
# [0], but the message is cut short (a string field announcing 100 bytes that are not there)
MALFORMED = [
    b"{not protobuf, not framed",
    b"\x00" + struct.pack(">I", UNKNOWN_ID) + b"\x00\x0a\x01x",
    b"\x00\x00\x00\x00\x01\x00\x0a\x64abc",
]


def referrer_of(event: dict) -> str | None:
    """The ``referrer`` a v2 event carries (None for purchases)."""
    return f"ref{event['page']}" if event["kind"] == "click" else None


def message_class(schema: str, name: str = "offsetbatch.sample.Event"):
    """The message class of ``name`` in ``schema`` (.proto text), compiled by grpcio-tools' protoc."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "event.proto").write_text(schema)
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"--proto_path={tmp}", "--include_imports",
                        f"--descriptor_set_out={tmp}/set.pb", "event.proto"], check=True, cwd=tmp)
        fds = descriptor_pb2.FileDescriptorSet.FromString((Path(tmp) / "set.pb").read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


class ProtobufEvents:
    """An ``encoder`` for ``sample.producer.produce``: the event as Protobuf with schema ``EVENT_V1``
    or ``EVENT_V2``, registered under ``<topic>-value``; ``form`` "prefix" or "header"."""

    def __init__(self, registry_url: str, topic: str, schema: str = EVENT_V1, form: str = "prefix") -> None:
        import uuid

        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

        client = SchemaRegistryClient({"url": registry_url})
        registered = client.register_schema_full_response(f"{topic}-value", Schema(schema, "PROTOBUF"))
        self.schema_id, self.form = registered.schema_id, form
        self.guid = uuid.UUID(registered.guid).bytes if registered.guid else None
        self.cls = message_class(schema)
        self.with_referrer = "referrer" in schema

    def __call__(self, event: dict) -> tuple[bytes, list[tuple[str, bytes]]]:
        m = self.cls(event_id=event["event_id"], kind=event["kind"], user_id=event["user_id"], page=event["page"])
        m.event_time.FromDatetime(datetime.fromisoformat(event["event_time"]))
        if event.get("amount") is not None:
            m.amount = event["amount"]
        if self.with_referrer and referrer_of(event) is not None:
            m.referrer = referrer_of(event)
        indexes = b"\x00"  # message indexes [0]: the single 0 byte
        if self.form == "header":  # the indexes follow the GUID in the header; the value is the bare message
            return m.SerializeToString(), [("__value_schema_id", b"\x01" + self.guid + indexes)]
        return b"\x00" + struct.pack(">I", self.schema_id) + indexes + m.SerializeToString(), []
