"""Exactly-once checks of a table against what was produced, record by record.

Used by the demo and the tests. It reads the table through the documented read path (the
Parquet files under ``<table>``, which hold committed batches only) with pyarrow: no Spark needed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.dataset as ds

from offsetbatch.ledger import Ledger
from offsetbatch.model import OffsetRange
from offsetbatch.sinks.rejected_files import RejectedFolders
from offsetbatch.sinks.files import TableLayout


def _read(path: str, columns: list[str]):
    p = Path(path.removeprefix("file://"))
    if not p.exists() or not any(p.rglob("*.parquet")):
        return None
    # partitioning="hive" reads batch_id/event_date from folder names; hidden folders (_*) are skipped.
    return ds.dataset(str(p), format="parquet", partitioning="hive",
                      exclude_invalid_files=True, ignore_prefixes=["_", "."]).to_table(columns=columns)


def output_ids(table: str, id_column: str = "event_id") -> list[str]:
    t = _read(table, [id_column])
    return [] if t is None else t.column(id_column).to_pylist()


def output_batches(table: str) -> Counter:
    t = _read(table, ["batch_id"])
    return Counter() if t is None else Counter(t.column("batch_id").to_pylist())


def rejected_offsets(table: str) -> list[tuple[int, int]]:
    t = _read(RejectedFolders(table).base, ["kafka_partition", "kafka_offset"])
    if t is None:
        return []
    return list(zip(t.column("kafka_partition").to_pylist(), t.column("kafka_offset").to_pylist()))


@dataclass
class Report:
    produced: int
    output: int
    duplicates: dict[str, int] = field(default_factory=dict)
    missing: set[str] = field(default_factory=set)
    unexpected: set[str] = field(default_factory=set)
    rejected_expected: int = 0
    rejected_found: int = 0
    rejected_duplicates: int = 0
    rejected_mismatch: int = 0
    contiguity_errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.missing or self.unexpected or self.rejected_duplicates
                    or self.rejected_mismatch or self.contiguity_errors)

    def summary(self) -> str:
        verdict = "PASS" if self.ok else "FAIL"
        return (f"exactly-once check {verdict}: produced {self.produced} valid ids, output {self.output} rows, "
                f"{len(self.duplicates)} duplicated, {len(self.missing)} missing, {len(self.unexpected)} unexpected; "
                f"rejected {self.rejected_found}/{self.rejected_expected} malformed records "
                f"({self.rejected_duplicates} duplicated, {self.rejected_mismatch} wrong); "
                f"ledger ranges contiguous: {'yes' if not self.contiguity_errors else self.contiguity_errors}")


def contiguity(ledger: Ledger, pipeline: str) -> list[str]:
    """No two committed ranges of a partition overlap, and the incremental ones chain from the
    partition's start to its frontier, with holes only where a gap row records skipped offsets
    (invariant 1). Backfilled history (before the start) is checked for overlap only."""
    errors: list[str] = []
    gaps = {}
    for _, g in ledger.list_gaps(pipeline):
        gaps.setdefault((g.topic, g.partition), []).append((g.from_offset, g.until_offset))
    by_tp: dict[tuple[str, int], list[OffsetRange]] = {}
    previous: dict[tuple[str, int], tuple[int, OffsetRange]] = {}
    for batch_id, r in ledger.all_ranges(pipeline):
        key = (r.topic, r.partition)
        if key in previous and previous[key][1].until_offset > r.from_offset:
            errors.append(f"{r.topic}/{r.partition}: batch {batch_id} {r} overlaps batch {previous[key][0]} "
                          f"{previous[key][1]}")
        previous[key] = (batch_id, r)
        if r.frontier_before is not None:
            by_tp.setdefault(key, []).append(r)
    for row in ledger.frontier_rows(pipeline):
        key = (row["topic"], row["partition"])
        pos = row["start_offset"]
        spans = sorted([(r.from_offset, r.until_offset, "range") for r in by_tp.get(key, [])]
                       + [(a, b, "gap") for a, b in gaps.get(key, [])])
        for a, b, kind in spans:
            if a != pos:
                errors.append(f"{key[0]}/{key[1]}: {kind} [{a},{b}) does not start at {pos}")
            pos = b
        if pos != row["next_offset"]:
            errors.append(f"{key[0]}/{key[1]}: ranges end at {pos} but the frontier is {row['next_offset']}")
    return errors


def _report(ids: list, rejected: list[tuple[int, int]] | None, valid_ids: set[str],
            malformed: list[tuple[int, int]] | None, ledger: Ledger | None, pipeline: str | None) -> Report:
    """Output ids against produced ids, rejected (partition, offset) pairs against the malformed
    records', and the ledger's contiguity: one verdict for every sink."""
    counts = Counter(ids)
    report = Report(produced=len(valid_ids), output=len(ids))
    report.duplicates = {k: v for k, v in counts.items() if v > 1}
    report.missing = valid_ids - set(counts)
    report.unexpected = set(counts) - valid_ids
    if malformed is not None:
        found = Counter(rejected or [])
        report.rejected_expected = len(malformed)
        report.rejected_found = sum(found.values())
        report.rejected_duplicates = sum(1 for v in found.values() if v > 1)
        report.rejected_mismatch = len(set(found) ^ set(malformed))
    if ledger is not None and pipeline is not None:
        report.contiguity_errors = contiguity(ledger, pipeline)
    return report


def check(table: str, valid_ids: set[str], malformed: list[tuple[int, int]] | None = None,
          ledger: Ledger | None = None, pipeline: str | None = None) -> Report:
    return _report(output_ids(table), rejected_offsets(table) if malformed is not None else None, valid_ids,
                   malformed, ledger, pipeline)


# ---- the postgres sink: the table is the read path ------------------------------------------------

# ---- the files sink on an object store: the published manifests name the files ---------------------

def object_store_rows(fs, table: str, columns: list[str], part: str = "data") -> dict[int, list[tuple]]:
    """Rows of each published batch of a files table on an object store, read with ``fs`` (a
    pyarrow filesystem the caller built, not offsetbatch's), as the layout is documented: the group
    manifests under ``_offsetbatch/compactions/`` first (a compacted day: its files, named by their
    path under the table's root, are its members' rows, keyed here by the group's id), then the
    manifests under ``_offsetbatch/manifests/`` of every batch no group holds, and the Parquet files
    each names."""
    import json

    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    root = table.partition("://")[2]

    def manifests(folder: str) -> list[dict]:
        found = fs.get_file_info(pafs.FileSelector(f"{root}/_offsetbatch/{folder}", allow_not_found=True))
        out = []
        for info in sorted(found, key=lambda i: i.path):
            if info.type == pafs.FileType.File and info.base_name.startswith("batch_id=") and info.path.endswith(".json"):
                with fs.open_input_stream(info.path) as f:
                    out.append(json.loads(f.read()))
        return out

    def read(paths: list[str]) -> list[tuple]:
        rows: list[tuple] = []
        for path in paths:
            t = pq.read_table(path, filesystem=fs, columns=columns)
            rows.extend(zip(*(t.column(c).to_pylist() for c in columns)))
        return rows

    groups = manifests("compactions") if part == "data" else []
    out = {g["group"]: read([f"{root}/{key}" for key in sorted(g["files"])]) for g in groups}
    grouped = {m for g in groups for m in g["members"]}
    for manifest in manifests("manifests"):
        if manifest["output_id"] not in grouped:
            files = manifest["data_files" if part == "data" else "rejected_files"]
            out[manifest["output_id"]] = read([uri.partition("://")[2] for uri in files])
    return out


def check_object_store(fs, table: str, valid_ids: set[str], malformed: list[tuple[int, int]] | None = None,
                       ledger: Ledger | None = None, pipeline: str | None = None) -> Report:
    ids = [r[0] for rows in object_store_rows(fs, table, ["event_id"]).values() for r in rows]
    rejected = ([r for rows in object_store_rows(fs, table, ["kafka_partition", "kafka_offset"], "rejected").values()
                 for r in rows] if malformed is not None else None)
    return _report(ids, rejected, valid_ids, malformed, ledger, pipeline)


def table_rows(url: str, table: str, columns: list[str], where: str = "") -> list[tuple]:
    """Rows of a postgres sink's table (``schema.table``), read with plain SQL: every row there
    belongs to a committed batch. ``where`` is fixed SQL from the caller, never user input."""
    import sqlalchemy as sa
    from psycopg2 import sql

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            cur = conn.connection.driver_connection.cursor()
            schema, name = table.split(".")
            cur.execute("SELECT to_regclass(%s) IS NOT NULL", (f'"{schema}"."{name}"',))
            if not cur.fetchone()[0]:
                return []
            cur.execute(sql.SQL("SELECT {} FROM {} " + where).format(
                sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(schema, name)))
            return cur.fetchall()
    finally:
        engine.dispose()


def rows_per_batch(url: str, table: str) -> Counter:
    return Counter(r[0] for r in table_rows(url, table, ["batch_id"]))


def check_table(url: str, table: str, valid_ids: set[str], malformed: list[tuple[int, int]] | None = None,
                ledger: Ledger | None = None, pipeline: str | None = None) -> Report:
    """``check`` for a postgres sink: ids in ``table``, malformed records in ``<table>_rejected``."""
    rejected = table_rows(url, f"{table}_rejected", ["kafka_partition", "kafka_offset"]) if malformed is not None else None
    return _report([r[0] for r in table_rows(url, table, ["event_id"])], rejected, valid_ids, malformed, ledger, pipeline)


# ---- the iceberg sink: read with pyiceberg (not the sink's code) -----------------------------------

def iceberg_table(catalog_url: str, identifier: str, catalog_name: str = "offsetbatch", **properties: str):
    """The table as any pyiceberg user loads it (``None`` if it does not exist); ``properties``:
    FileIO settings such as ``s3.endpoint`` for a table on an object store."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import NoSuchTableError

    catalog = SqlCatalog(catalog_name, uri=catalog_url, **properties)
    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        return None
    finally:
        catalog.engine.dispose()


def iceberg_rows(catalog_url: str, identifier: str, columns: list[str], snapshot_id: int | None = None,
                 catalog_name: str = "offsetbatch", **properties: str) -> list[tuple]:
    """Rows of the current (or a given) snapshot, through pyiceberg's scan to Arrow."""
    table = iceberg_table(catalog_url, identifier, catalog_name, **properties)
    if table is None:
        return []
    t = table.scan(selected_fields=tuple(columns), snapshot_id=snapshot_id).to_arrow()
    return list(zip(*(t.column(c).to_pylist() for c in columns)))


def check_iceberg(catalog_url: str, identifier: str, valid_ids: set[str],
                  malformed: list[tuple[int, int]] | None = None, ledger: Ledger | None = None,
                  pipeline: str | None = None, catalog_name: str = "offsetbatch", **properties: str) -> Report:
    """``check`` for an iceberg sink: ids in the table's current snapshot, malformed records in
    ``<table>_rejected``, both read with pyiceberg."""
    ids = [r[0] for r in iceberg_rows(catalog_url, identifier, ["event_id"], catalog_name=catalog_name, **properties)]
    rejected = (iceberg_rows(catalog_url, f"{identifier}_rejected", ["kafka_partition", "kafka_offset"],
                             catalog_name=catalog_name, **properties) if malformed is not None else None)
    return _report(ids, rejected, valid_ids, malformed, ledger, pipeline)


# ---- the delta sink: read with Polars (not the sink's code, nor delta-rs's scan) ---------------

def delta_rows(location: str, columns: list[str], version: int | None = None,
               storage_options: dict[str, str] | None = None) -> list[tuple]:
    """Rows of the table's current (or a given) version, through Polars' Delta reader (``[]`` when
    the table does not exist)."""
    import polars as pl
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(location, storage_options=storage_options):
        return []
    frame = pl.read_delta(location, version=version, columns=columns, storage_options=storage_options)
    return list(frame.iter_rows())


def check_delta(location: str, valid_ids: set[str], malformed: list[tuple[int, int]] | None = None,
                ledger: Ledger | None = None, pipeline: str | None = None,
                storage_options: dict[str, str] | None = None) -> Report:
    """``check`` for a delta sink: ids in the table's current version, malformed records in
    ``<table>_rejected``, both read with Polars."""
    ids = [r[0] for r in delta_rows(location, ["event_id"], storage_options=storage_options)]
    rejected = (delta_rows(f"{location}_rejected", ["kafka_partition", "kafka_offset"], storage_options=storage_options)
                if malformed is not None else None)
    return _report(ids, rejected, valid_ids, malformed, ledger, pipeline)

