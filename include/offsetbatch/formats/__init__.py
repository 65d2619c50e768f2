"""Value formats: how the Spark job parses Kafka values, chosen by ``value.format`` in the pipeline
YAML. Adding a format: one module with a ``ValueFormat`` subclass, one line in ``FORMATS``, tests."""

from __future__ import annotations

from offsetbatch.formats.base import ERROR, META, ValueFormat
from offsetbatch.formats.json_value import JsonFormat
from offsetbatch.formats.raw import RawFormat

FORMATS: dict[str, type[ValueFormat]] = {
    RawFormat.name: RawFormat,
    JsonFormat.name: JsonFormat,
}

__all__ = ["ERROR", "FORMATS", "META", "ValueFormat"]
