"""The iceberg sink's columns: the staged Parquet's schema as the table's, which changes are
compatible, and the partition spec.

* **Evolution.** A column the batch has and the table lacks is added (optional, so older
  snapshots read it as null). A column whose type the batch widens the way Iceberg allows
  (``int -> long``, ``float -> double``, a decimal's precision) is promoted. A batch narrower than
  the table (``int`` into a ``long`` column) needs nothing: readers promote the file's values. Any
  other change is refused *before the ledger transaction* (``incompatible``), naming the column:
  after it, the batch could never be published.
* **Nullability.** Every column is created optional: Spark marks literals and Kafka's offset
  non-null, and a required column would refuse a later batch whose transform makes it nullable.
* **Partitions.** ``partition_by`` (identity, year/month/day/hour) becomes the table's spec.
  ``add_files`` infers each file's partition from its column bounds, so the job writes each
  partition's rows into files of their own (``stage_partitions``), computed in UTC like Iceberg's
  transforms, whatever Spark's session time zone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from offsetbatch.errors import SinkSchemaError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import IcebergType
    from pyspark.sql import Column, DataFrame

BATCH_ID = "batch_id"
DAY_US = 86_400_000_000
HOUR_US = 3_600_000_000


def optional(schema: "pa.Schema") -> "pa.Schema":
    """``schema`` with every top-level field nullable (module docstring, *Nullability*)."""
    import pyarrow as pa

    return pa.schema([f.with_nullable(True) for f in schema])


def to_iceberg(schema: "pa.Schema") -> "Schema":
    """An Arrow schema as an Iceberg schema (fresh field ids: for comparing types only)."""
    from pyiceberg.io.pyarrow import _pyarrow_to_schema_without_ids  # the conversion create_table uses

    return _pyarrow_to_schema_without_ids(schema)


def _widens(narrow: "IcebergType", wide: "IcebergType") -> bool:
    """Iceberg's type promotions (the table spec's *Schema Evolution*)."""
    from pyiceberg.types import DecimalType, DoubleType, FloatType, IntegerType, LongType

    if isinstance(narrow, IntegerType) and isinstance(wide, LongType):
        return True
    if isinstance(narrow, FloatType) and isinstance(wide, DoubleType):
        return True
    return (isinstance(narrow, DecimalType) and isinstance(wide, DecimalType) and narrow.scale == wide.scale
            and narrow.precision < wide.precision)


def _same(a: "IcebergType", b: "IcebergType") -> bool:
    """Equal types, ignoring nested field ids (fresh ids differ from the table's)."""
    import re

    strip = re.compile(r"\b\d+: ")
    return a == b or strip.sub("", str(a)) == strip.sub("", str(b))


def incompatible(table: "Schema", staged: "pa.Schema") -> list[str]:
    """Why the batch's columns cannot go into ``table`` (empty when they can)."""
    problems = []
    current = {f.name: f.field_type for f in table.fields}
    for field in to_iceberg(optional(staged)).fields:
        have = current.get(field.name)
        if have is None or _same(have, field.field_type) or _widens(field.field_type, have) \
                or _widens(have, field.field_type):
            continue
        problems.append(f"column {field.name!r} is {have} in the table but the batch's rows have {field.field_type}")
    return problems


def check(table: "Schema", staged: "pa.Schema", where: str) -> None:
    """``SinkSchemaError`` naming every column whose type change Iceberg cannot make."""
    problems = incompatible(table, staged)
    if problems:
        raise SinkSchemaError(
            f"{where}: {'; '.join(problems)}. Iceberg can only widen int to long, float to double and a decimal's "
            f"precision. Nothing was committed: the batch stays planned. Cast the column back in the transform (or "
            f"write to a new table), then clear the spark_job task.")


def evolve(tx, staged: "pa.Schema") -> list[str]:
    """Add the batch's new columns to the table and widen promoted ones, in transaction ``tx``.
    Returns the columns that changed (for the log line)."""
    before = {f.name: f.field_type for f in tx.table_metadata.schema().fields}
    arrow = optional(staged)
    after = {f.name: f.field_type for f in to_iceberg(arrow).fields}
    changed = [n for n, t in after.items() if n not in before or not (_same(before[n], t) or _widens(t, before[n]))]
    if changed:
        with tx.update_schema() as update:
            for name in changed:
                if name in before:
                    update.update_column(name, field_type=after[name])
            new = [f for f in arrow if f.name not in before]
            if new:
                import pyarrow as pa

                update.union_by_name(pa.schema(new))
    return changed


def partition_spec(tx, partitions: list[tuple[str, str]]) -> None:
    """The table's spec, in the transaction that creates it."""
    from pyiceberg.transforms import DayTransform, HourTransform, IdentityTransform, MonthTransform, YearTransform

    transforms = {"identity": IdentityTransform, "year": YearTransform, "month": MonthTransform,
                  "day": DayTransform, "hour": HourTransform}
    if not partitions:
        return
    with tx.update_spec() as spec:
        for transform, column in partitions:
            name = column if transform == "identity" else f"{column}_{transform}"
            spec.add_field(column, transforms[transform](), name)


# ---- job half (Spark) --------------------------------------------------------------------------

def stage_partitions(data: "DataFrame", partitions: list[tuple[str, str]], where: str) -> tuple["DataFrame", list[str]]:
    """``data`` with one hidden column per partition field holding the Iceberg partition value
    (UTC), for ``partitionBy``: each file then holds one partition's rows. The hidden columns
    become folder names, not file columns."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, TimestampType

    names = []
    types = {f.name: f.dataType for f in data.schema.fields}
    for i, (transform, column) in enumerate(partitions):
        if column not in types:
            raise SinkSchemaError(f"{where}: sink.partition_by names column {column!r}, which is not in the "
                                  f"transform's output ({', '.join(data.columns)}). Fix sink.partition_by or the "
                                  f"transform. Nothing was committed.")
        col = F.col(column)
        if transform == "identity":
            value: "Column" = col
        else:
            kind = types[column]
            if isinstance(kind, TimestampType):
                days = F.floor(F.unix_micros(col) / DAY_US)
                hours = F.floor(F.unix_micros(col) / HOUR_US)
            elif isinstance(kind, DateType) and transform != "hour":
                days, hours = F.unix_date(col), None
            else:
                raise SinkSchemaError(f"{where}: sink.partition_by {transform}({column}) needs a timestamp (or, "
                                      f"except for hour, a date) column; {column} is {kind.simpleString()}. Fix "
                                      f"sink.partition_by or cast the column in the transform.")
            day = F.date_from_unix_date(days)
            value = {"day": days, "hour": hours, "year": F.year(day) - 1970,
                     "month": (F.year(day) - 1970) * 12 + F.month(day) - 1}[transform]
        name = f"_p{i}"
        data = data.withColumn(name, value)
        names.append(name)
    return data, names
