"""The postgres sink's load: ``COPY … FROM STDIN WITH (FORMAT csv)`` streamed from the staged
Parquet files, one record batch at a time, so the commit's memory stays bounded whatever the
batch size. pyarrow's CSV writer renders each record batch in C++; only ``bytea`` (``\\x`` hex)
and nested values (JSON text) are converted in Python, and only for the columns that have them.
"""

from __future__ import annotations

import base64
import io
import json
from datetime import datetime
from typing import TYPE_CHECKING, Any, Iterator

from offsetbatch import storage

if TYPE_CHECKING:
    import pyarrow as pa

READ_BATCH_ROWS = 65_536  # rows per record batch read from Parquet: bounds the commit's memory


def _json_default(v: Any) -> Any:
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if isinstance(v, datetime):
        return v.isoformat()
    return str(v)


def _csv_ready(batch: "pa.RecordBatch", pg_types: list[str], batch_id: int | None) -> "pa.RecordBatch":
    """One record batch as columns pyarrow's CSV writer renders the way PostgreSQL reads them:
    timestamps in UTC microseconds, ``bytea`` as ``\\x`` hex, nested values as JSON text; the
    output id first when ``batch_id`` is given."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arrays, names = [], []
    if batch_id is not None:
        arrays.append(pa.array([batch_id] * batch.num_rows, pa.int64()))
        names.append("batch_id")
    for i, (field, pg) in enumerate(zip(batch.schema, pg_types)):
        col = batch.column(i)
        if pa.types.is_dictionary(col.type):
            col = col.dictionary_decode()
        if pa.types.is_timestamp(col.type):
            col = pc.cast(col, pa.timestamp("us", tz="UTC") if pg.startswith("timestamp with") else pa.timestamp("us"),
                          safe=False)
        elif pg == "bytea":
            col = pa.array([None if v is None else "\\x" + v.hex() for v in col.to_pylist()], pa.string())
        elif pg == "jsonb":
            col = pa.array([None if v is None else json.dumps(v, default=_json_default) for v in col.to_pylist()],
                           pa.string())
        arrays.append(col)
        names.append(field.name)
    return pa.RecordBatch.from_arrays(arrays, names=names)


class CopyStream(io.RawIOBase):
    """A read-only file over Parquet files, yielding CSV one record batch at a time: what
    ``copy_expert`` reads from. Holds at most one record batch and its CSV text in memory."""

    def __init__(self, files: list[str], columns: list[str], pg_types: list[str], batch_id: int):
        super().__init__()
        self._chunks = self._generate(files, columns, pg_types, batch_id)
        self._cur, self._pos = b"", 0
        self.rows = 0

    def _generate(self, files: list[str], columns: list[str], pg_types: list[str], batch_id: int) -> Iterator[bytes]:
        import pyarrow.csv as pcsv
        import pyarrow.parquet as pq

        options = pcsv.WriteOptions(include_header=False)
        for path in files:
            fs, local = storage._fs(path)  # noqa: SLF001 - the one place that resolves URIs to filesystems
            with fs.open(local, "rb") as fh:
                pf = pq.ParquetFile(fh)
                for batch in pf.iter_batches(batch_size=READ_BATCH_ROWS, columns=columns):
                    if batch.num_rows == 0:
                        continue
                    out = io.BytesIO()
                    pcsv.write_csv(_csv_ready(batch, pg_types, batch_id), out, options)
                    self.rows += batch.num_rows
                    yield out.getvalue()

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes of the current chunk (fewer is fine: ``copy_expert`` reads until
        ``b""``); slicing one chunk at a time never copies the rest of the stream."""
        if size is None or size < 0:
            rest, self._cur, self._pos = self._cur[self._pos:], b"", 0
            return rest + b"".join(self._chunks)
        while self._pos >= len(self._cur):
            nxt = next(self._chunks, None)
            if nxt is None:
                return b""
            self._cur, self._pos = nxt, 0
        out = self._cur[self._pos:self._pos + size]
        self._pos += len(out)
        return out


def copy_rows(cur, target: Any, files: list[str], names: list[str], types: list[str], batch_id: int) -> int:
    """COPY the ``names`` columns (of PostgreSQL ``types``) of the Parquet ``files`` into ``target``
    (a ``psycopg2.sql`` identifier), ``batch_id`` first; returns the rows read (0 without files)."""
    from psycopg2 import sql

    if not files:
        return 0
    stream = CopyStream(files, names, types, batch_id)
    statement = sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT csv)").format(
        target, sql.SQL(", ").join(map(sql.Identifier, ["batch_id", *names])))
    cur.copy_expert(statement.as_string(cur), stream, size=1 << 20)
    return stream.rows
