"""A batch's staged columns against the Delta table's: what may go in, and what is refused while
the batch is still planned.

New columns are added (the commit merges schemas); a column the batch lacks is null in its rows.
A column whose type changed is refused unless the table's type holds every value of the staged one
(an int staged into a long column): delta-rs would otherwise cast the values silently, a string
column taking ``5`` as ``"5"`` and a long narrowed to an int."""

from __future__ import annotations

from typing import TYPE_CHECKING

from offsetbatch.errors import SinkSchemaError

if TYPE_CHECKING:
    import pyarrow as pa

BATCH_ID = "batch_id"
# staged type -> table types that hold all of its values (Delta's primitive names)
WIDER = {"byte": {"short", "integer", "long"}, "short": {"integer", "long"}, "integer": {"long"},
         "float": {"double"}, "date": {"timestamp", "timestamp_ntz"}}


def delta_types(schema: "pa.Schema") -> dict[str, str]:
    """Column -> Delta's type name (``long``, ``struct<…>``) of an Arrow schema."""
    from deltalake import Schema

    return {f.name: _name(f.type) for f in Schema.from_arrow(schema).fields}


def _name(t: object) -> str:
    return getattr(t, "type", None) or str(t)


def check(table_schema: "pa.Schema", staged: "pa.Schema", where: str) -> list[str]:
    """Raise ``SinkSchemaError`` naming each column the table cannot take; return the new columns."""
    have, new = delta_types(table_schema), delta_types(staged)
    changed = [(c, have[c], t) for c, t in new.items() if c in have and have[c] != t
               and have[c] not in WIDER.get(t, ())]
    if changed:
        shown = "; ".join(f"{c}: {was} in the table, {now} in the batch" for c, was, now in changed)
        raise SinkSchemaError(
            f"{where}: the batch's column type(s) changed ({shown}). A Delta table keeps a column's type; the batch "
            f"stays planned and nothing was committed. Cast the column back in the transform (CAST(x AS <old type>)), "
            f"or write to a new table (sink.table) and fill it with a rewind.")
    return [c for c in new if c not in have]
