"""The Protobuf schemas a batch is decoded with: the ``confluent-protobuf`` format's plan-time hook
(``ValueFormat.resolve_schemas``), run by the plan task, the only place that talks to the schema
registry. Like the Avro formats' (``formats.avro_schemas``):

* the **reader**: a registry subject's version (``latest`` pinned when the batch is planned and
  recorded with it) and one of its messages (``value.message``, default the file's first, which is
  what Confluent's serializers call message index ``[0]``): the shape of the output;
* the **writers**: every version of the writer subjects (default the reader's), listed before the
  ledger is opened and again after the plan (``refreshed``); a replay keeps the writers its batch was
  planned with (``with_planned``).

Each schema is compiled at plan time, with its **references** (the registry's ``references`` list:
other subjects' versions a schema imports, by import name, fetched recursively), into a serialized
``FileDescriptorSet`` by ``protoc`` as ``grpcio-tools`` bundles it (with the well-known types'
``.proto`` files, ``google/protobuf/timestamp.proto`` and the others, which need no reference). The
job builds its message classes from those bytes; it never compiles nor asks a registry. A schema
``protoc`` refuses fails the plan, naming the pipeline, the subject and version, and protoc's own
message. The registry serves a schema as ``.proto`` text; one registered in the serialized form (a
base64 ``FileDescriptorProto``, what confluent-kafka's Python serializer sends) is taken as it is.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from offsetbatch.errors import ConfigError
from offsetbatch.formats import protobuf_decode as pbd
from offsetbatch.formats.avro_schemas import check_reader_fields
from offsetbatch.formats.base import SchemaContext, ValueSettings

if TYPE_CHECKING:
    from offsetbatch.source.schema_registry import RegistrySchema, SchemaRegistry

log = logging.getLogger(__name__)
MAIN = "offsetbatch_schema_{id}.proto"  # the file name a subject's own schema is compiled under
BUILTIN = ("google/protobuf/",)  # imports protoc's bundled files answer (the registry's references to them are skipped)
PROTOC_TIMEOUT_S = 60


class ProtobufSchemaError(ConfigError):
    """A registry schema that does not compile, or no message fits: the plan fails naming it."""


@dataclass(frozen=True)
class ProtobufSchemas:
    reader: dict  # subject, version, id, message, file, descriptor_set (base64)
    reader_type: dict  # the reader message's Spark type (JSON form)
    writers: dict[str, dict] = field(default_factory=dict)  # by schema id: file, descriptor_set, subject, version, guid, incompatible
    writer_subjects: list[str] = field(default_factory=list)
    registry: str | None = None

    def to_spec(self) -> dict:
        return asdict(self)

    def recorded(self) -> dict:
        return {"reader": {k: self.reader[k] for k in ("subject", "version", "id", "message")},
                "writer_ids": sorted(int(k) for k in self.writers),
                "incompatible": sorted(int(k) for k, w in self.writers.items() if w.get("incompatible")),
                "registry": self.registry, "reader_fields": [f["name"] for f in self.reader_type["fields"]]}

    def describe(self) -> str:
        r = self.reader
        bad = [k for k, w in self.writers.items() if w.get("incompatible")]
        return (f"reader subject {r['subject']} version {r['version']} (id {r['id']}) message {r['message']}; "
                f"{len(self.writers)} writer schema(s) (ids {', '.join(sorted(self.writers, key=int))})"
                f"{'; incompatible with the reader: ids ' + ', '.join(bad) if bad else ''}")


# ---- compiling --------------------------------------------------------------------------------

def as_descriptor(text: str) -> bytes | None:
    """The serialized ``FileDescriptorProto`` when ``text`` is one in base64 (the registry's
    ``format=serialized`` form), else ``None`` (``.proto`` text)."""
    stripped = "".join(text.split())
    if not stripped or any(c in text for c in ";{}"):
        return None
    try:
        raw = base64.b64decode(stripped, validate=True)
    except (binascii.Error, ValueError):
        return None
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    try:
        descriptor_pb2.FileDescriptorProto.FromString(raw)
    except DecodeError:
        return None
    return raw


def compile_files(main: str, files: dict[str, str], what: str) -> bytes:
    """A serialized ``FileDescriptorSet`` of ``main`` and everything it imports: ``files`` maps import
    names to schema text (``.proto`` text or a base64 ``FileDescriptorProto``); imports of the
    well-known types come from grpcio-tools' bundled includes. Raises ``ProtobufSchemaError`` with
    protoc's message, naming ``what``."""
    from google.protobuf import descriptor_pb2

    serialized = {name: d for name, text in files.items() if (d := as_descriptor(text)) is not None}
    with tempfile.TemporaryDirectory(prefix="offsetbatch-protoc-") as tmp:
        root = Path(tmp) / "src"
        for name, text in files.items():
            if name not in serialized:
                path = root / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
        if main in serialized:  # nothing to compile: the set is the serialized files plus the bundled ones they import
            return _serialized_set(main, serialized)
        out = Path(tmp) / "set.pb"
        args = [sys.executable, "-m", "grpc_tools.protoc", f"--proto_path={root}", "--include_imports",
                f"--descriptor_set_out={out}"]
        if serialized:
            given = descriptor_pb2.FileDescriptorSet()
            for name, raw in serialized.items():
                proto = given.file.add()
                proto.ParseFromString(raw)
                proto.name = name
            (Path(tmp) / "given.pb").write_bytes(given.SerializeToString())
            args.append(f"--descriptor_set_in={Path(tmp) / 'given.pb'}")
        args.append(main)
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=PROTOC_TIMEOUT_S, cwd=root,
                                  env={**os.environ, "PYTHONWARNINGS": "ignore"})
        except subprocess.TimeoutExpired:
            raise ProtobufSchemaError(f"{what}: protoc did not finish in {PROTOC_TIMEOUT_S} s") from None
        if done.returncode != 0 or not out.exists():
            message = " ".join((done.stderr or done.stdout or f"exit code {done.returncode}").split())
            raise ProtobufSchemaError(f"{what} does not compile (protoc: {message})")
        return out.read_bytes()


def _serialized_set(main: str, serialized: dict[str, bytes]) -> bytes:
    """``main`` and its serialized imports, dependencies first, the well-known types from the runtime."""
    from google.protobuf import descriptor_pb2, descriptor_pool
    # the well-known types' files, into the default pool (a serialized schema imports them by name)
    from google.protobuf import (any_pb2, api_pb2, duration_pb2, empty_pb2, field_mask_pb2,  # noqa: F401
                                 source_context_pb2, struct_pb2, timestamp_pb2, type_pb2, wrappers_pb2)

    out, done = descriptor_pb2.FileDescriptorSet(), set()

    def add(name: str) -> None:
        if name in done:
            return
        done.add(name)
        proto = descriptor_pb2.FileDescriptorProto()
        if name in serialized:
            proto.ParseFromString(serialized[name])
            proto.name = name
        else:
            try:
                descriptor_pool.Default().FindFileByName(name).CopyToProto(proto)
            except KeyError:
                raise ProtobufSchemaError(f"{main} imports {name}, which no reference names") from None
        for dep in proto.dependency:
            add(dep)
        out.file.append(proto)

    add(main)
    return out.SerializeToString()


def compiled(reg: "SchemaRegistry", found: "RegistrySchema", where: str) -> tuple[str, bytes]:
    """(the main file's name, its ``FileDescriptorSet``) of a registry schema with its references."""
    what = (f"{where}: the Protobuf schema of subject '{found.subject}' version {found.version} (id {found.schema_id})"
            if found.subject else f"{where}: the Protobuf schema id {found.schema_id}")
    main = MAIN.format(id=found.schema_id)
    files = {main: found.schema_str}
    _add_references(reg, found, files, where, ())
    return main, compile_files(main, files, what)


def _add_references(reg: "SchemaRegistry", found: "RegistrySchema", files: dict[str, str], where: str,
                    chain: tuple[str, ...]) -> None:
    for ref in found.references:
        if ref.name in files or ref.name.startswith(BUILTIN):
            continue
        if ref.subject in chain:
            raise ProtobufSchemaError(f"{where}: the references of subject '{found.subject}' loop back to "
                                      f"'{ref.subject}'")
        dep = reg.subject_version(ref.subject, ref.version, f"{where} (a reference, {ref.name})")
        files[ref.name] = dep.schema_str
        _add_references(reg, dep, files, where, (*chain, ref.subject))


# ---- resolving --------------------------------------------------------------------------------

def _open(settings: ValueSettings, ctx: SchemaContext) -> "SchemaRegistry":
    if ctx.registry is not None:
        return ctx.registry()
    from offsetbatch.source.schema_registry import SchemaRegistry

    return SchemaRegistry.from_connection(settings.schema_registry.conn_id, f"{ctx.role}.schema_registry.conn_id")


def from_registry(settings: ValueSettings, ctx: SchemaContext) -> ProtobufSchemas:
    role, where = ctx.role, f"pipeline {ctx.pipeline}"
    ref = settings.schema_registry
    subject = ref.subject or f"{(ctx.topics or ('?',))[0]}-{role}"
    with _open(settings, ctx) as reg:
        found = reg.subject_version(subject, ref.version, f"{where} ({role}.schema_registry: its reader schema)")
        what = f"{where}: the {role} reader schema, subject '{subject}' version {found.version}"
        if found.schema_type.upper() != "PROTOBUF":
            raise ProtobufSchemaError(f"{what} is a {found.schema_type} schema; format 'confluent-protobuf' needs a "
                                      f"Protobuf one. Point {role}.schema_registry.subject at the Protobuf subject.")
        main, fds = compiled(reg, found, where)
        pool = pbd.pool_of(fds)
        file_desc = pool.FindFileByName(main)
        message = getattr(settings, "message", None)
        tops = list(file_desc.message_types_by_name.values())
        if message:
            try:
                desc = pool.FindMessageTypeByName(message)
            except KeyError:
                desc = None
            if desc is None or desc.file.name != main:
                raise ProtobufSchemaError(f"{what} has no message {message!r} (its messages: "
                                          f"{', '.join(d.full_name for d in tops) or 'none'}); fix {role}.message")
        elif not tops:
            raise ProtobufSchemaError(f"{what} defines no message")
        else:
            desc = tops[0]
        try:
            reader_type = pbd.spark_type(desc)
        except pbd.RecursiveMessage as exc:
            raise ProtobufSchemaError(f"{what}: {exc}") from None
        try:
            check_reader_fields([f["name"] for f in reader_type["fields"]], list(settings.required), f"message {desc.full_name}")
        except ValueError as exc:
            raise ProtobufSchemaError(f"{what}: {exc}") from None
        reader = {"subject": subject, "version": found.version, "id": found.schema_id, "message": desc.full_name,
                  "file": main, "descriptor_set": base64.b64encode(fds).decode("ascii")}
        schemas = ProtobufSchemas(reader, reader_type, {}, list(ref.writer_subjects or [subject]), reg.settings.url)
        return _with_writers(schemas, reg, where)


def refreshed(settings: ValueSettings, schemas: ProtobufSchemas | None, ctx: SchemaContext) -> ProtobufSchemas | None:
    if schemas is None:
        return None
    with _open(settings, ctx) as reg:
        return _with_writers(schemas, reg, f"pipeline {ctx.pipeline}")


def with_planned(schemas: ProtobufSchemas | None, planned: dict | None) -> ProtobufSchemas | None:
    """``schemas`` plus the writers a replayed batch was planned with that today's listing lacks."""
    if schemas is None or not planned:
        return schemas
    writers = dict(schemas.writers)
    for key, old in (planned.get("writers") or {}).items():
        if key not in writers:
            writers[key] = {**old, "incompatible": _incompatible(schemas, old["file"], old["descriptor_set"])}
            log.info("writer schema id %s: no longer listed by the registry, kept from the replayed batch's plan", key)
    return replace(schemas, writers=writers)


def _with_writers(schemas: ProtobufSchemas, reg: "SchemaRegistry", where: str) -> ProtobufSchemas:
    writers = dict(schemas.writers)
    for subject in schemas.writer_subjects:
        for version in reg.versions(subject, f"{where} (value.schema_registry: the writer schemas)"):
            found = reg.subject_version(subject, version, f"{where} (a writer schema)")
            key = str(found.schema_id)
            if key in writers:
                continue
            entry = {"subject": found.subject, "version": found.version, "guid": found.guid}
            if found.schema_type.upper() != "PROTOBUF":
                writers[key] = {**entry, "file": None, "descriptor_set": None,
                                "incompatible": f"it is a {found.schema_type} schema, not Protobuf"}
                continue
            if found.schema_id == schemas.reader["id"]:
                main, fds = schemas.reader["file"], base64.b64decode(schemas.reader["descriptor_set"])
            else:
                main, fds = compiled(reg, found, where)
            b64 = base64.b64encode(fds).decode("ascii")
            writers[key] = {**entry, "file": main, "descriptor_set": b64,
                            "incompatible": _incompatible(schemas, main, b64)}
    added = sorted(set(writers) - set(schemas.writers), key=int)
    if added:
        log.info("%s: Protobuf writer schema id(s) %s from subject(s) %s", where, ", ".join(added),
                 ", ".join(schemas.writer_subjects))
    return replace(schemas, writers=writers)


def _incompatible(schemas: ProtobufSchemas, main: str, descriptor_set: str) -> str | None:
    """Why the writer's version of the reader's message cannot land in the reader's columns, or None
    (a writer without that message is fine: its records are rejected one by one, naming theirs)."""
    reader = pbd.pool_of(schemas.reader["descriptor_set"]).FindMessageTypeByName(schemas.reader["message"])
    try:
        writer = pbd.pool_of(descriptor_set).FindMessageTypeByName(schemas.reader["message"])
    except KeyError:
        return None
    try:
        problems = pbd.incompatibility(writer, reader)
    except pbd.RecursiveMessage as exc:
        return str(exc)
    return f"field(s) {', '.join(problems)}" if problems else None
