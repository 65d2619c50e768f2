"""The benchmark's events as Confluent-framed Protobuf (``make bench``'s ``protobuf`` phase), and the
schema registry they name.

The values are what Confluent's ``ProtobufSerializer`` writes in the prefix form (``0x00``, the 4-byte
big-endian schema id, the message indexes ``[0]`` as the single byte ``0x00``, the message), built
here by the protobuf runtime from the schema compiled by grpcio-tools' protoc, the prefix prepended
by hand (as ``avro_dataset`` does for Avro): the same events as the JSON and Avro data sets
(``dataset.event``, seeded alike). The schema (``SCHEMA``, ``.proto`` text) is registered under
``<topic>-value`` in the tests' stand-in registry, served in this process only while the job's
``value_schemas`` are resolved as the plan task resolves them; the measured job never asks it.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from offsetbatch_dev.bench import avro_dataset
from offsetbatch_dev.bench.dataset import Dataset, ensure_dataset
from offsetbatch_dev.sample.protobuf_events import message_class

# The JSON and Avro data sets' fields: ``kind`` an enum, ``event_time`` a Timestamp, ``amount`` optional.
SCHEMA = """syntax = "proto3";
package offsetbatch.bench;

import "google/protobuf/timestamp.proto";

message BenchEvent {
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
  string session = 7;
  string agent = 8;
}
"""


class PrefixedProtobuf:
    """An event as Confluent prefix-framed Protobuf with writer schema ``schema_id``."""

    def __init__(self, schema_id: int) -> None:
        self.prefix = b"\x00" + struct.pack(">I", schema_id) + b"\x00"  # + message indexes [0]
        self.cls = message_class(SCHEMA, "offsetbatch.bench.BenchEvent")

    def __call__(self, event: dict) -> bytes:
        m = self.cls(event_id=event["event_id"], kind=event["kind"], user_id=event["user_id"], page=event["page"],
                     session=event["session"], agent=event["agent"])
        m.event_time.FromDatetime(event["event_time"])
        if event.get("amount") is not None:
            m.amount = event["amount"]
        return self.prefix + m.SerializeToString()


def ensure_protobuf_dataset(bootstrap: str, server: Any, records: int, partitions: int) -> tuple[Dataset, int]:
    """The Protobuf data set (topic ``bench-protobuf-<N>-<P>``) and its schema id."""
    topic = f"bench-protobuf-{records}-{partitions}"
    schema_id = server.register(f"{topic}-value", SCHEMA, "PROTOBUF").id
    ds = ensure_dataset(bootstrap, topic, records, partitions, encode=PrefixedProtobuf(schema_id))
    found = avro_dataset._first_prefix(bootstrap, topic)
    if found != PrefixedProtobuf(schema_id).prefix[:5]:
        raise RuntimeError(f"topic {topic} holds records framed {found.hex()}, not with schema id {schema_id}: delete "
                           f"it ('offsetbatch-stack kafka wipe') and run again")
    return ds, schema_id


def value_schemas(ds: Dataset, server: Any, required: list[str], work: Path) -> dict:
    """The job spec's ``value_schemas`` as the plan task resolves them (``confluent-protobuf``,
    ``schema_id: prefix``, reader: the subject's latest version)."""
    return avro_dataset.value_schemas(ds, server, required, work, "confluent-protobuf")
