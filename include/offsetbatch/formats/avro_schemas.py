"""The Avro schemas a batch is decoded with: the Avro formats' plan-time hook
(``ValueFormat.resolve_schemas``), run by the plan task, the only place that talks to a schema
registry (``source.schema_registry``); the job gets them in its spec.

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
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

from offsetbatch.errors import ConfigError
from offsetbatch.formats import avro_schema
from offsetbatch.formats.base import ERROR, META, SchemaContext, ValueSettings

if TYPE_CHECKING:
    from offsetbatch.source.schema_registry import RegistrySchema, SchemaRegistry

log = logging.getLogger(__name__)
PLAIN_WRITER = "0"  # the one writer of the ``avro`` format, keyed like a registry id in the job spec
RESERVED = (*META, "value", ERROR)


def check_reader_fields(fields: list[str], required: list[str], where: str) -> None:
    """The reader's fields become columns next to the Kafka ones: refuse a clash or a required field
    the reader does not have."""
    clash = [f for f in fields if f.lower() in {r.lower() for r in RESERVED}]
    if clash:
        raise ValueError(f"{where} has field(s) {', '.join(clash)} named like the job's own columns "
                         f"({', '.join(RESERVED)}); rename them in the reader schema")
    missing = [f for f in required if f not in fields]
    if missing:
        raise ValueError(f"'required' names field(s) {', '.join(missing)} that {where} does not have")


@dataclass(frozen=True)
class ValueSchemas:
    reader: str
    reader_from: dict  # {"subject", "version", "id"} or {"file"}
    writers: dict[str, dict] = field(default_factory=dict)  # by schema id: schema, guid, subject, version, ...
    writer_subjects: list[str] = field(default_factory=list)
    registry: str | None = None  # the registry's URL, for messages

    def to_spec(self) -> dict:
        return asdict(self)

    def recorded(self) -> dict:
        """What the ledger keeps of the schemas a batch was planned with (its ``value_schema`` event)."""
        return {"reader": self.reader_from, "writer_ids": sorted((int(k) for k in self.writers)),
                "incompatible": sorted(int(k) for k, w in self.writers.items() if w.get("incompatible")),
                "registry": self.registry, "reader_fields": [f["name"] for f in json.loads(self.reader)["fields"]]}

    def describe(self) -> str:
        """One line for the task log: the reader and how many writers."""
        source = self.reader_from
        reader = (f"subject {source['subject']} version {source['version']} (id {source['id']})"
                  if "subject" in source else source.get("file", "value.avro_schema"))
        bad = [k for k, w in self.writers.items() if w.get("incompatible")]
        return (f"reader {reader}; {len(self.writers)} writer schema(s)"
                f"{' (ids ' + ', '.join(sorted(self.writers, key=int)) + ')' if self.registry else ''}"
                f"{'; incompatible with the reader: ids ' + ', '.join(bad) if bad else ''}")


def of_file(settings: "ValueSettings", ctx: SchemaContext) -> ValueSchemas:
    """The ``avro`` format's schemas: its reader, which is also its one writer."""
    text = _reader_file(settings, ctx)
    return ValueSchemas(text, {"file": _file_name(settings, ctx)}, {PLAIN_WRITER: _writer(text, text, None)})


def from_registry(settings: "ValueSettings", ctx: SchemaContext) -> ValueSchemas:
    """``confluent-avro``'s schemas now: the reader (a file, or a subject's version with ``latest``
    pinned) and every version of the writer subjects."""
    role, where = ctx.role, f"pipeline {ctx.pipeline}"
    ref = settings.schema_registry
    subject = ref.subject or f"{(ctx.topics or ('?',))[0]}-{role}"
    with _open(settings, ctx) as reg:
        if settings.avro_schema:
            reader, reader_from = _reader_file(settings, ctx), {"file": _file_name(settings, ctx)}
        else:
            found = reg.subject_version(subject, ref.version, f"{where} ({role}.schema_registry: its reader schema)")
            _refuse_unusable(found, f"{where}: the {role} reader schema, subject '{subject}' version {found.version}",
                             role)
            reader = found.schema_str
            reader_from = {"subject": subject, "version": found.version, "id": found.schema_id}
            _check_reader(settings, ctx, reader, f"subject '{subject}' version {found.version}")
        schemas = ValueSchemas(reader, reader_from, {}, list(ref.writer_subjects or [subject]), reg.settings.url)
        return _with_writers(schemas, reg, where)


def refreshed(settings: "ValueSettings", schemas: ValueSchemas | None, ctx: SchemaContext) -> ValueSchemas | None:
    """``schemas`` with the writer versions registered since (same reader)."""
    if schemas is None or schemas.registry is None:
        return schemas
    with _open(settings, ctx) as reg:
        return _with_writers(schemas, reg, f"pipeline {ctx.pipeline}")


def with_planned(schemas: ValueSchemas | None, planned: dict | None) -> ValueSchemas | None:
    """``schemas`` plus every writer ``planned`` (a replayed batch's job spec) had that they lack: a
    writer version soft-deleted from the registry since (no longer listed, so not among today's) still
    decodes the records the first run accepted. Each is checked against today's reader again."""
    if schemas is None or not planned:
        return schemas
    writers = dict(schemas.writers)
    kept = []
    for key, old in (planned.get("writers") or {}).items():
        if key not in writers:
            writers[key] = {**_writer(schemas.reader, old["schema"], None),
                            **{k: old.get(k) for k in ("guid", "subject", "version")}}
            kept.append(key)
    if kept:
        log.info("writer schema id(s) %s: no longer listed by the registry, kept from the replayed batch's plan",
                 ", ".join(sorted(kept, key=int)))
    return replace(schemas, writers=writers)


def _open(settings: "ValueSettings", ctx: SchemaContext) -> "SchemaRegistry":
    if ctx.registry is not None:
        return ctx.registry()
    from offsetbatch.source.schema_registry import SchemaRegistry

    return SchemaRegistry.from_connection(settings.schema_registry.conn_id, f"{ctx.role}.schema_registry.conn_id")


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


def _check_reader(settings: "ValueSettings", ctx: SchemaContext, text: str, what: str) -> None:
    try:
        names = avro_schema.field_names(text)
    except avro_schema.AvroSchemaError as exc:  # a recursive reader (issue 41, case 15)
        raise ConfigError(f"pipeline {ctx.pipeline}: the {ctx.role} reader schema {what} {exc}") from None
    try:
        check_reader_fields(names, list(settings.required), what)
    except ValueError as exc:
        raise ConfigError(f"pipeline {ctx.pipeline}: the {ctx.role} reader schema {exc}") from None


def _file_name(settings: "ValueSettings", ctx: SchemaContext) -> str:
    given = settings.avro_schema or ""
    return f"{ctx.role}.avro_schema (inline)" if given.lstrip().startswith("{") else given


def _reader_file(settings: "ValueSettings", ctx: SchemaContext) -> str:
    try:
        text = avro_schema.load_text(settings.avro_schema or "", ctx.base_dir)
        avro_schema.parse(text)
    except avro_schema.AvroSchemaError as exc:
        raise ConfigError(f"pipeline {ctx.pipeline}: {ctx.role}.avro_schema: {exc}") from None
    _check_reader(settings, ctx, text, f"{ctx.role}.avro_schema")
    return text
