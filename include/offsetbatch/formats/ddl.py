"""A Spark DDL column list (``value.schema``) read without Spark: the job's columns are known at
config load, and lineage reports them."""

from __future__ import annotations


def ddl_fields(ddl: str) -> list[tuple[str, str]]:
    """(name, type) of each top-level field of a DDL string (``<...>`` and ``(...)`` do not split)."""
    parts, depth, cur = [], 0, ""
    for ch in ddl:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    fields = []
    for part in (p.strip() for p in parts if p.strip()):
        name, _, kind = part.partition(" ")
        fields.append((name.strip("`"), kind.strip()))
    return fields


def ddl_field_names(ddl: str) -> list[str]:
    """Field names of a DDL string (top-level commas only)."""
    return [name for name, _ in ddl_fields(ddl)]
