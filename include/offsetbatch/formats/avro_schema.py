"""Avro schemas as the plan task checks them before a batch is read: pure Python (fastavro and the
Apache ``avro`` library, both pinned with confluent-kafka's ``avro`` extra), no Spark.

* ``parse``: a schema's text, refused with the reason when it is not a valid Avro record schema;
* ``field_names``: the record's top-level fields, which become the output's columns;
* ``incompatibility``: why a reader schema cannot read what a writer schema wrote (Avro's schema
  resolution rules, the Apache library's ``ReaderWriterCompatibilityChecker``), naming the field;
* ``all_null_body``: the bytes of the one record whose fields all decode to null. Spark's
  ``from_avro`` in PERMISSIVE mode turns bytes it cannot decode into a struct of nulls, so a struct
  of nulls is a decode failure unless the body is exactly these bytes.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any


class AvroSchemaError(ValueError):
    """A schema that is not a usable Avro record schema (the message says why)."""


def load_text(schema: str, base_dir: str | Path | None = None) -> str:
    """The schema's JSON text: ``schema`` itself when it is inline JSON (starts with ``{``), otherwise
    the ``.avsc`` file it names (relative paths: from ``base_dir``, the pipeline file's folder)."""
    if schema.lstrip().startswith("{"):
        return schema
    path = Path(schema)
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    try:
        return path.read_text()
    except OSError as exc:
        raise AvroSchemaError(f"cannot read the Avro schema file {path}: {exc.strerror or exc}") from None


def parse(text: str) -> dict[str, Any]:
    """The schema as JSON, checked: a valid Avro schema whose top level is a record."""
    import fastavro

    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AvroSchemaError(f"the Avro schema is not JSON ({exc})") from None
    try:
        fastavro.parse_schema(schema, _write_hint=False)
    except Exception as exc:  # fastavro raises SchemaParseException, UnknownType, ValueError...
        raise AvroSchemaError(f"not a valid Avro schema ({type(exc).__name__}: {exc})") from None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise AvroSchemaError("the Avro schema's top level must be a record (its fields become the output's "
                              "columns)")
    return schema


def field_names(text: str) -> list[str]:
    """A reader schema's top-level fields (the output's columns); refused when Spark cannot read it."""
    schema = parse(text)
    if loop := recursion(schema):
        raise AvroSchemaError(f"is recursive ({loop}): Spark's from_avro cannot read a recursive schema. Give a "
                              f"reader schema without the recursive field (the writer's may keep it: a reader that "
                              f"leaves a field out skips it)")
    return [f["name"] for f in schema["fields"]]


def recursion(schema: dict[str, Any]) -> str | None:
    """Where a named record contains itself (``record 'shop.Node' contains itself through field
    children``), or ``None``: Spark's ``from_avro`` refuses such a schema when the job starts."""
    named: dict[str, Any] = {}

    def full(t: dict, space: str | None) -> str:
        name = t.get("name", "")
        ns = t.get("namespace", space)
        return name if "." in name or not ns else f"{ns}.{name}"

    def walk(t: Any, path: tuple[str, ...], open_records: dict[str, int], space: str | None) -> str | None:
        if isinstance(t, str):
            key = t if t in named else (f"{space}.{t}" if space and f"{space}.{t}" in named else None)
            if key is None:
                return None
            if key in open_records:
                return f"record {key!r} contains itself through field {'.'.join(path[open_records[key]:])}"
            return walk(named[key], path, open_records, space)
        if isinstance(t, list):
            return next((found for b in t if (found := walk(b, path, open_records, space))), None)
        kind = t.get("type")
        if kind in ("record", "error", "enum", "fixed") and t.get("name"):
            named[full(t, space)] = t
        if kind in ("record", "error"):
            name = full(t, space)
            inner = {**open_records, name: len(path)}
            ns = t.get("namespace", space) if "." not in t.get("name", "") else t["name"].rsplit(".", 1)[0]
            return next((found for f in t.get("fields", [])
                         if (found := walk(f["type"], (*path, f["name"]), inner, ns))), None)
        if kind == "array":
            return walk(t["items"], path, open_records, space)
        if kind == "map":
            return walk(t["values"], path, open_records, space)
        if isinstance(kind, (dict, list)):
            return walk(kind, path, open_records, space)
        return None

    return walk(schema, (), {}, None)


def incompatibility(reader: str, writer: str) -> str | None:
    """``None`` when ``reader`` can read every record ``writer`` wrote, else why not, naming the
    field (the Apache library's message and location, e.g. ``/fields/1/type``)."""
    from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType
    from avro.schema import parse as avro_parse

    result = ReaderWriterCompatibilityChecker().get_compatibility(avro_parse(reader), avro_parse(writer))
    if result.compatibility is SchemaCompatibilityType.compatible:
        return None
    reader_fields = parse(reader)["fields"]
    fields = sorted({f for f in (_field_at(reader_fields, loc) for loc in result.locations) if f})
    kinds = ", ".join(sorted(i.name for i in result.incompatibilities))
    return (f"{'field(s) ' + ', '.join(repr(f) for f in fields) + ': ' if fields else ''}"
            f"{'; '.join(sorted(result.messages))} ({kinds} at {', '.join(sorted(result.locations))})")


def _field_at(fields: list[dict], location: str) -> str | None:
    """The reader's top-level field a checker location such as ``/fields/1/type`` points at."""
    parts = location.strip("/").split("/")
    if len(parts) >= 2 and parts[0] == "fields" and parts[1].isdigit() and int(parts[1]) < len(fields):
        return fields[int(parts[1])]["name"]
    return None


def all_null_body(writer: str) -> bytes | None:
    """The body of the record whose every field is null, or ``None`` when ``writer`` has a field that
    cannot be null (then no good record decodes to all nulls)."""
    import fastavro

    schema = fastavro.parse_schema(json.loads(writer), _write_hint=False)
    out = io.BytesIO()
    try:
        fastavro.schemaless_writer(out, schema, {f["name"]: None for f in json.loads(writer)["fields"]})
    except (ValueError, TypeError, AttributeError, KeyError):
        return None
    return out.getvalue()


def text_fields(text: str) -> dict[str, Any]:
    """Where the reader record holds text, by top-level field: each field's Avro type reduced to what
    holds strings (``"string"``; ``{"record": {field: …}}``; ``{"array": …}``; ``{"map": …}``, whose keys
    are strings too; ``{"union": [(spark member index, …)]}`` for unions of more than one type besides
    null, which Spark decodes to a struct of ``member<i>``), fields without text left out. Spark's
    ``from_avro`` copies a string's bytes without checking them, so the job checks these for UTF-8.
    Named types are followed; a recursive one is followed once."""
    schema = json.loads(text)
    named: dict[str, Any] = {}

    def walk(t: Any, seen: frozenset) -> Any:
        if isinstance(t, str):
            if t == "string":
                return "string"
            if t in named and t not in seen:
                return walk(named[t], seen | {t})
            return None
        if isinstance(t, list):
            branches = [b for b in t if b != "null"]
            if len(branches) == 1:
                return walk(branches[0], seen)
            members = [(i, w) for i, b in enumerate(branches) if (w := walk(b, seen)) is not None]
            return {"union": members} if members else None
        kind = t.get("type")
        if kind in ("record", "error", "enum", "fixed") and t.get("name"):
            named[t["name"]] = t
            if t.get("namespace"):
                named[f"{t['namespace']}.{t['name']}"] = t
        if kind in ("record", "error"):
            name = t.get("name", "")
            inner = {f["name"]: w for f in t.get("fields", []) if (w := walk(f["type"], seen | {name})) is not None}
            return {"record": inner} if inner else None
        if kind == "array":
            items = walk(t["items"], seen)
            return {"array": items} if items is not None else None
        if kind == "map":
            return {"map": walk(t["values"], seen)}
        if kind == "string":
            return "string"  # a string with a logical type (uuid) is still a string's bytes
        return None

    top = walk(schema, frozenset())
    return top["record"] if top else {}
