"""``json``: each value is one JSON object parsed with the pipeline's Spark DDL schema.

Records that are null, not UTF-8, not JSON, do not fit the schema, or lack a required field are
rejected with that reason; the parsed fields replace the raw ``value`` in the output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from offsetbatch.formats.base import CORRUPT, ERROR, META, ValueFormat, ValueSettings, carried
from offsetbatch.formats.ddl import ddl_field_names

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from offsetbatch.jobspec import JobSpec


class JsonFormat(ValueFormat):
    name = "json"
    keeps_value = False

    @classmethod
    def check(cls, value: "ValueSettings") -> None:
        cls._refuse(value, "avro_schema", "schema_registry")
        if not value.schema_ddl:
            raise ValueError(f"format {value.format!r} needs a 'schema' (Spark DDL)")
        missing = [f for f in value.required if f not in ddl_field_names(value.schema_ddl)]
        if missing:
            raise ValueError(f"'required' names fields not in the schema: {', '.join(missing)}")

    @classmethod
    def parse(cls, records: "DataFrame", spec: "JobSpec") -> "DataFrame":
        from pyspark.sql import functions as F

        return parse_json_body(records, spec, F.col("value"))


def parse_json_body(records: "DataFrame", spec: "JobSpec", body: "Column",
                    framing_error: "Column | None" = None,
                    mismatch: "Callable[[Column], Column] | None" = None) -> "DataFrame":
    """The JSON in ``body`` (the value, or the part after a framing prefix) parsed with the pipeline's
    DDL; ``framing_error``: a reason to reject the record before its JSON is looked at (NULL if none);
    ``mismatch``: from the JSON text, a more precise reason for a schema mismatch than the generic
    one (NULL where it has none), evaluated only on the records the parser flagged."""
    from pyspark.sql import functions as F

    text = body.cast("string")
    parsed = F.from_json(text, f"{spec.schema_ddl}, {CORRUPT} STRING",
                         {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
    # from_json has no generated code, so Spark evaluates it in a projection of its own whose
    # output rows are copied: that projection keeps the UTF-8 verdict (a boolean), not the text.
    df = records.withColumns({"_valid_utf8": F.is_valid_utf8(text), "_parsed": parsed})
    missing = F.concat_ws(", ", *[F.when(F.col(f"_parsed.{f}").isNull(), F.lit(f)) for f in spec.required])
    any_missing = F.lit(False)
    for f in spec.required:
        any_missing = any_missing | F.col(f"_parsed.{f}").isNull()
    # Conditions run in order and stop at the first true one: a good record costs one UTF-8
    # validity scan, the one parse above and a null test per required field; only records the
    # parser flagged are looked at again (to tell malformed JSON from a schema mismatch).
    # Casting binary to string keeps invalid bytes as they are (no U+FFFD), so validity is
    # checked on the bytes' string, not by a marker.
    error = F.when(F.col("value").isNull(), F.lit("null value"))
    if framing_error is not None:
        error = error.when(framing_error.isNotNull(), framing_error)
    error = (
        error.when(~F.col("_valid_utf8"), F.lit("value is not valid UTF-8"))
        .when(F.col(f"_parsed.{CORRUPT}").isNotNull(),
              F.when(F.get_json_object(text, "$").isNull(), F.lit("malformed JSON"))
              .otherwise(F.coalesce(*([mismatch(text)] if mismatch else []),
                                    F.lit("schema mismatch: value does not fit the declared schema"))))
        .when(any_missing, F.concat(F.lit("missing required field(s): "), missing))
    )
    # The parsed fields by Spark's own expansion of the struct, in the schema's order: asking the
    # frame for its schema would be a round trip on Spark Connect, in which the server analyzes the plan.
    return df.select(*META, "value", "_parsed.*", error.alias(ERROR), carried(df, "_valid_utf8", "_parsed")).drop(CORRUPT)
