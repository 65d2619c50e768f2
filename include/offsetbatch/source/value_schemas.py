"""The Avro schemas a batch is decoded with, resolved by the plan task (the only place that talks to a
schema registry; the job gets them in its spec).

* the **reader schema**: the shape of the output. ``value.avro_schema`` (a file or inline), or a
  registry subject's version; ``latest`` is pinned when the batch's spec is written and recorded in
  the ledger's events (``value_schema``), so a retry of the same spec decodes the same way and a
  replay after the subject moved on writes the new shape.
* the **writer schemas**: every version of the writer subjects (``value.schema_registry
  .writer_subjects``, default the reader's subject). A serializer registers its schema before it
  produces, so once the batch's ranges are fixed (the plan read the end offsets) every record in them
  names a version that is already listed: the plan task lists them once before the ledger is opened
  (a registry that is down, refuses the credentials or lacks the subject changes nothing) and once
  more after the plan (``refreshed``) for versions registered in between.

Each writer is checked against the reader with Avro's resolution rules: one the reader cannot read is
kept with the reason, and the job fails the batch if a record names it (``formats.avro_value``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

from offsetbatch.errors import ConfigError
from offsetbatch.formats import avro_schema
from offsetbatch.formats.avro_value import PLAIN_WRITER, check_reader_fields

if TYPE_CHECKING:
    from offsetbatch.config import PipelineConfig
    from offsetbatch.source.schema_registry import RegistrySchema, SchemaRegistry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ValueSchemas:
    reader: str
    reader_from: dict  # {"subject", "version", "id"} or {"file"}
    writers: dict[str, dict] = field(default_factory=dict)  # by schema id: schema, guid, subject, version, ...
    writer_subjects: list[str] = field(default_factory=list)
    registry: str | None = None  # the registry's URL, for messages

    def to_spec(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """One line for the task log: the reader and how many writers."""
        source = self.reader_from
        reader = (f"subject {source['subject']} version {source['version']} (id {source['id']})"
                  if "subject" in source else source.get("file", "value.avro_schema"))
        bad = [k for k, w in self.writers.items() if w.get("incompatible")]
        return (f"reader {reader}; {len(self.writers)} writer schema(s)"
                f"{' (ids ' + ', '.join(sorted(self.writers, key=int)) + ')' if self.registry else ''}"
                f"{'; incompatible with the reader: ids ' + ', '.join(bad) if bad else ''}")


def resolve(cfg: "PipelineConfig", registry: "Callable[[], SchemaRegistry] | None" = None,
            role: str = "value") -> ValueSchemas | None:
    """The schemas of the pipeline's values (``role`` "value") or keys ("key") now, or ``None`` for a
    format that has none. ``registry`` opens the registry client (default: the ``schema_registry``
    connection of ``cfg.value`` or ``cfg.key``)."""
    settings, where = getattr(cfg, role), f"pipeline {cfg.name}"
    if settings.format == "avro":
        text = _reader_file(cfg, role)
        return ValueSchemas(text, {"file": _file_name(cfg, role)}, {PLAIN_WRITER: _writer(text, text, None)})
    if settings.format != "confluent-avro":
        return None
    ref = settings.schema_registry
    subject = ref.subject or f"{cfg.kafka.topics[0]}-{role}"
    with _open(cfg, registry, role) as reg:
        if settings.avro_schema:
            reader, reader_from = _reader_file(cfg, role), {"file": _file_name(cfg, role)}
        else:
            found = reg.subject_version(subject, ref.version, f"{where} ({role}.schema_registry: its reader schema)")
            _refuse_unusable(found, f"{where}: the {role} reader schema, subject '{subject}' version {found.version}",
                             role)
            reader = found.schema_str
            reader_from = {"subject": subject, "version": found.version, "id": found.schema_id}
            _check_reader(cfg, reader, f"subject '{subject}' version {found.version}", role)
        schemas = ValueSchemas(reader, reader_from, {}, list(ref.writer_subjects or [subject]), reg.settings.url)
        return _with_writers(schemas, reg, where)


def refreshed(cfg: "PipelineConfig", schemas: ValueSchemas | None,
              registry: "Callable[[], SchemaRegistry] | None" = None, role: str = "value") -> ValueSchemas | None:
    """``schemas`` with the writer versions registered since (same reader)."""
    if schemas is None or schemas.registry is None:
        return schemas
    with _open(cfg, registry, role) as reg:
        return _with_writers(schemas, reg, f"pipeline {cfg.name}")


def _open(cfg: "PipelineConfig", registry: "Callable[[], SchemaRegistry] | None", role: str) -> "SchemaRegistry":
    if registry is not None:
        return registry()
    from offsetbatch.source.schema_registry import SchemaRegistry

    return SchemaRegistry.from_connection(getattr(cfg, role).schema_registry.conn_id, f"{role}.schema_registry.conn_id")


def _with_writers(schemas: ValueSchemas, reg: "SchemaRegistry", where: str) -> ValueSchemas:
    writers = dict(schemas.writers)
    for subject in schemas.writer_subjects:
        for version in reg.versions(subject, f"{where} (value.schema_registry: the writer schemas)"):
            found = reg.subject_version(subject, version, f"{where} (a writer schema)")
            if str(found.schema_id) not in writers:
                writers[str(found.schema_id)] = _writer(schemas.reader, found.schema_str, found)
    added = sorted(set(writers) - set(schemas.writers), key=int)
    if added:
        log.info("%s: writer schema id(s) %s from subject(s) %s", where, ", ".join(added),
                 ", ".join(schemas.writer_subjects))
    return replace(schemas, writers=writers)


def _writer(reader: str, text: str, found: "RegistrySchema | None") -> dict:
    """A writer's entry in the spec: its schema, its GUID (the header form names it so), whether the
    reader can read it, and the body of its all-null record."""
    problem = None
    if found is not None and found.schema_type.upper() != "AVRO":
        problem = f"it is a {found.schema_type} schema, not Avro"
    elif found is not None and found.references:
        problem = (f"it imports named types from other subjects (references: "
                   f"{', '.join(r.subject + ' v' + str(r.version) for r in found.references)}), which offsetbatch does "
                   f"not resolve yet")
    else:
        try:
            avro_schema.parse(text)
            problem = avro_schema.incompatibility(reader, text)
        except Exception as exc:  # AvroSchemaError, or the Apache library's SchemaParseException
            problem = f"it does not parse ({exc})"
    body = avro_schema.all_null_body(text) if problem is None else None
    return {"schema": text, "guid": found.guid if found is not None else None,
            "subject": found.subject if found is not None else None,
            "version": found.version if found is not None else None,
            "all_null": body.hex() if body is not None else None, "incompatible": problem}


def _refuse_unusable(found: "RegistrySchema", what: str, role: str) -> None:
    if found.schema_type.upper() != "AVRO":
        raise ConfigError(f"{what} is a {found.schema_type} schema; format 'confluent-avro' needs an Avro one. "
                          f"Point {role}.schema_registry.subject at the Avro subject.")
    if found.references:
        raise ConfigError(f"{what} imports named types from other subjects, which offsetbatch does not resolve yet; "
                          f"give the full schema as {role}.avro_schema instead.")


def _check_reader(cfg: "PipelineConfig", text: str, what: str, role: str) -> None:
    try:
        check_reader_fields(avro_schema.field_names(text), list(getattr(cfg, role).required), what)
    except ValueError as exc:
        raise ConfigError(f"pipeline {cfg.name}: the {role} reader schema {exc}") from None


def _file_name(cfg: "PipelineConfig", role: str) -> str:
    given = getattr(cfg, role).avro_schema or ""
    return f"{role}.avro_schema (inline)" if given.lstrip().startswith("{") else given


def _reader_file(cfg: "PipelineConfig", role: str) -> str:
    try:
        text = avro_schema.load_text(getattr(cfg, role).avro_schema or "", cfg.base_dir)
        avro_schema.parse(text)
    except avro_schema.AvroSchemaError as exc:
        raise ConfigError(f"pipeline {cfg.name}: {role}.avro_schema: {exc}") from None
    _check_reader(cfg, text, f"{role}.avro_schema", role)
    return text


def recorded(schemas: ValueSchemas) -> dict:
    """What the ledger keeps of the schemas a batch was planned with (its ``value_schema`` event)."""
    return {"reader": schemas.reader_from, "writer_ids": sorted((int(k) for k in schemas.writers)),
            "incompatible": sorted(int(k) for k, w in schemas.writers.items() if w.get("incompatible")),
            "registry": schemas.registry, "reader_fields": [f["name"] for f in json.loads(schemas.reader)["fields"]]}
