"""Rows of an Iceberg table's data files, read and written again: compaction joins small files
(``maintenance``) and a replay rewrites a compacted file without the replaced batch's rows
(``sink``, copy-on-write). Both go through pyiceberg's own scan and writer, so field ids,
statistics and partition values are pyiceberg's."""

from __future__ import annotations

import itertools
import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata


def batch_bounds(table: "Table", data_file: "DataFile") -> tuple[int, int] | None:
    """The file's smallest and largest ``batch_id`` (None: no statistics, or no such column)."""
    from pyiceberg.conversions import from_bytes

    from offsetbatch.sinks.iceberg.schema import BATCH_ID

    try:
        column = table.schema().find_field(BATCH_ID)
    except ValueError:
        return None
    lo, hi = data_file.lower_bounds or {}, data_file.upper_bounds or {}
    if column.field_id not in lo or column.field_id not in hi:
        return None
    return (from_bytes(column.field_type, lo[column.field_id]), from_bytes(column.field_type, hi[column.field_id]))


def read_rows(metadata: "TableMetadata", io: "FileIO", files: list["DataFile"],
              row_filter: "BooleanExpression | None" = None) -> "pa.Table":
    """The rows of ``files`` in the table's current schema (columns added later read as null)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.table import FileScanTask

    scan = ArrowScan(metadata, io, metadata.schema(), row_filter if row_filter is not None else AlwaysTrue())
    return scan.to_table([FileScanTask(f) for f in files])


def write_rows(metadata: "TableMetadata", io: "FileIO", rows: "pa.Table",
               target_size: int | None = None) -> list["DataFile"]:
    """Parquet files of ``rows`` under the table's ``data/`` with pyiceberg's writer (field ids,
    statistics, the partition spec); not committed: the caller's snapshot adds them."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files
    from pyiceberg.table import TableProperties

    if target_size is not None:
        metadata = metadata.model_copy(update={"properties": {
            **metadata.properties, TableProperties.WRITE_TARGET_FILE_SIZE_BYTES: str(target_size)}})
    return list(_dataframe_to_data_files(table_metadata=metadata, df=rows, io=io, write_uuid=uuid.uuid4(),
                                         counter=itertools.count(0)))
