"""The benchmark's events as Confluent-framed Avro (``make bench``'s ``avro`` phase), and the schema
registry they name.

The values are what confluent-kafka's ``AvroSerializer`` writes in the prefix form (``0x00``, the
4-byte big-endian schema id, the Avro body), but written here with fastavro's ``schemaless_writer``
and the prefix prepended by hand: the serializer costs tens of microseconds per record in Python,
too slow for 5,000,000 of them, and the bytes are the same. The schema id is the one the registry
assigned when the schema was registered under ``<topic>-value`` (``register``), so the job resolves
it from the registry exactly as in production; a reused topic is checked to carry that id.

No real registry can run on this machine: the tests' stand-in (``tests/schema_registry_server.py``)
serves it in this process, on 127.0.0.1, only while the plan-time resolution runs; the measured
Spark applications never ask it (the job gets the schemas in its spec, the peer as an argument).
"""

from __future__ import annotations

import importlib.util
import io
import json
import struct
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import fastavro
import yaml

from offsetbatch_dev import PROJECT_ROOT
from offsetbatch_dev.bench.dataset import Dataset, ensure_dataset
from offsetbatch_dev.sample.avro_events import FIELDS_V1

# The JSON data set's fields (``dataset.event``); ``event_time`` as timestamp-micros, ``kind`` an enum.
SCHEMA = json.dumps({"type": "record", "name": "BenchEvent", "namespace": "offsetbatch.bench",
                     "fields": [*FIELDS_V1, {"name": "session", "type": "string"},
                                {"name": "agent", "type": "string"}]})
REGISTRY_CONN = "bench_schema_registry"  # the pipeline's value.schema_registry.conn_id (given as settings here)
SERVER = PROJECT_ROOT / "tests" / "schema_registry_server.py"


class PrefixedAvro:
    """An event as Confluent prefix-framed Avro with writer schema ``schema_id``."""

    def __init__(self, schema_id: int, schema: str = SCHEMA) -> None:
        self.prefix = b"\x00" + struct.pack(">I", schema_id)
        self.parsed = fastavro.parse_schema(json.loads(schema))

    def __call__(self, event: dict) -> bytes:
        buf = io.BytesIO()
        buf.write(self.prefix)
        fastavro.schemaless_writer(buf, self.parsed, {**event, "amount": event.get("amount")})
        return buf.getvalue()


@contextmanager
def registry() -> Iterator[Any]:
    """The stand-in registry (``SchemaRegistryServer``), imported by path: ``tests/`` is no package."""
    spec = importlib.util.spec_from_file_location("schema_registry_server", SERVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    with module.SchemaRegistryServer() as server:
        yield server


def _first_prefix(bootstrap: str, topic: str) -> bytes:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10_000)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        record = next(iter(consumer))
        return record.value[:5]
    finally:
        consumer.close()


def ensure_avro_dataset(bootstrap: str, server: Any, records: int, partitions: int) -> tuple[Dataset, int]:
    """The Avro data set (topic ``bench-avro-<N>-<P>``) and its schema id: the schema registered
    under the topic's subject first, the records produced with that id unless the topic holds them."""
    topic = f"bench-avro-{records}-{partitions}"
    schema_id = server.register(f"{topic}-value", SCHEMA).id
    ds = ensure_dataset(bootstrap, topic, records, partitions, encode=PrefixedAvro(schema_id))
    found = _first_prefix(bootstrap, topic)
    if found != PrefixedAvro(schema_id).prefix:
        raise RuntimeError(f"topic {topic} holds records framed {found.hex()}, not with schema id {schema_id}: delete "
                           f"it ('offsetbatch-stack kafka wipe') and run again")
    return ds, schema_id


def value_schemas(ds: Dataset, server: Any, required: list[str], work: Path,
                  value_format: str = "confluent-avro") -> dict:
    """The job spec's ``value_schemas`` as the plan task resolves them: a pipeline config with
    ``value.format: <value_format>`` (``schema_id: prefix``; ``confluent-protobuf`` for
    ``protobuf_dataset``) and ``plan.schemas.resolve`` against the registry (reader: the subject's
    latest version, pinned)."""
    from offsetbatch.source.schema_registry import RegistrySettings, SchemaRegistry
    from offsetbatch.pipeline import Pipeline
    from offsetbatch.plan.schemas import resolve

    name = value_format.removeprefix("confluent-")
    path = work / f"bench-{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": f"bench_{name}", "kafka": {"topics": [ds.topic]},
        "value": {"format": value_format, "schema_registry": {"conn_id": REGISTRY_CONN}, "schema_id": "prefix",
                  "required": required},
        "sink": {"path": str(work / f"bench-{name}-unused")}}))
    schemas = resolve(Pipeline.load(path), registry=lambda: SchemaRegistry(RegistrySettings.from_fields(REGISTRY_CONN,
                                                                                                      server.url)))
    assert schemas is not None
    return schemas.to_spec()
