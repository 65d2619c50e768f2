"""The iceberg sink's upsert: a table a version decides, derived from the table of its changes
(the PostgreSQL sink's change log, carried over to snapshots; docs/architecture.md).

Two tables:

* ``<table>_changes``: every change, written exactly as the append sink writes a table (one
  snapshot per batch with its marker; a replay replaces its batch's files);
* ``<table>``: per key, the newest change of ``<table>_changes`` unless that change is a delete.
  Each of its snapshots says in its summary which snapshot of ``<table>_changes`` it reflects
  (``offsetbatch.changes-snapshot``).

``refresh`` brings ``<table>`` from the changes snapshot it reflects, S0, to the current one, S:

1. the data files S has and S0 had not, and those S0 had and S has not: the keys they hold are the
   touched keys (a replay's old files are among the removed ones, so a key missing from its new
   output is touched too);
2. each touched key's newest change among S's files: a scan filtered by those keys, one record
   batch at a time (memory: the touched keys' changes, never the table);
3. one transaction: delete the touched keys' rows (copy-on-write of the files holding them), append
   the newest changes that are not deletes, the last snapshot marked with S.

A crash leaves ``<table>`` at S0 (the transaction is one catalog commit), and the next refresh
does it again, so the publish that follows a crash finishes it. "Newest" is the greatest
``version_column`` (when set), then offset, partition, topic, as in the PostgreSQL sink.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from offsetbatch.errors import SinkSchemaError
from offsetbatch.sinks.keyed import RECORD_COLUMNS, UpsertRule, check_changes, newest_per_key, refuse_nulls  # noqa: F401

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table

log = logging.getLogger(__package__)

CHANGES_SNAPSHOT = "offsetbatch.changes-snapshot"
KEY_PROPERTY = "offsetbatch.upsert-key"  # the upserted table's key (a JSON list), set by its first refresh


@dataclass(frozen=True)
class Refreshed:
    changes_snapshot: int | None
    touched: int  # keys whose row was recomputed
    written: int  # of them, keys with a row now
    snapshot_id: int | None  # the table's new snapshot; None when nothing changed


def reflected(table: "Table | None") -> int | None:
    """The changes snapshot ``table`` reflects (None: none yet)."""
    if table is None or table.current_snapshot() is None:
        return None
    summary = table.current_snapshot().summary
    value = summary.additional_properties.get(CHANGES_SNAPSHOT) if summary else None
    return int(value) if value else None


def check_mode(table: "Table | None", upserts: bool, where: str, key: Sequence[str] = ()) -> None:
    """A table written in one mode is refused by the other, and an upserted table by another key,
    naming both: by the plan (``IcebergSink.check_writable``) before any Spark job, and by the
    commit before the ledger transaction. An append table's rows are not one per key (upsert mode
    would leave the rows it has no change for); an upserted table has no batch markers (append mode
    could not tell what it holds); a key changed under an upserted table would leave it and
    ``<table>_changes`` keyed two ways."""
    if table is None or table.current_snapshot() is None:
        return
    derived = any(s.summary and CHANGES_SNAPSHOT in s.summary.additional_properties for s in table.snapshots())
    new_table = ("Give the sink a new table (sink.table) and fill it with a rewind: README, *Change data "
                 "capture*, changing the key")
    if upserts and not derived:
        raise SinkSchemaError(
            f"{where}: the table was written in append mode (one row per record); mode upsert derives it from "
            f"<table>_changes and cannot take over its rows. Nothing was planned or committed; the batch stays "
            f"planned. Set mode back to append, or upsert into a new table. {new_table}.")
    if not upserts and derived:
        raise SinkSchemaError(
            f"{where}: the table is an upserted table (one row per key, derived from <table>_changes); append mode "
            f"cannot write into it. Nothing was planned or committed; the batch stays planned. Set mode: upsert "
            f"again, or give the sink a new table name.")
    was = json.loads(table.properties[KEY_PROPERTY]) if upserts and KEY_PROPERTY in table.properties else None
    if was is not None and list(was) != list(key):
        raise SinkSchemaError(
            f"{where}: the table is upserted by key ({', '.join(was)}), but sink.key is now [{', '.join(key)}]. "
            f"Nothing was planned or committed: the table and <table>_changes would be keyed two ways. Set "
            f"sink.key back to [{', '.join(was)}], or use a new key in a new table. {new_table}.")


def data_files(table: "Table", snapshot_id: int | None) -> dict[str, object]:
    """Path -> ``DataFile`` of the files snapshot ``snapshot_id`` of ``table`` reads."""
    if snapshot_id is None:
        return {}
    return {task.file.file_path: task.file for task in table.scan(snapshot_id=snapshot_id).plan_files()}


def touched_keys(changes: "Table", before: int | None, after: int, rule: UpsertRule, where: str) -> "pa.Table":
    """The distinct keys held by the files that differ between two changes snapshots; a NULL key
    (which no key filter would ever find again) refuses the refresh, naming its record."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    old, new = data_files(changes, before), data_files(changes, after)
    differing = sorted((set(old) - set(new)) | (set(new) - set(old)))
    parts = []
    for path in differing:
        with changes.io.new_input(path).open() as f:
            parts.append(pq.read_table(f, columns=list(dict.fromkeys([*rule.key, *RECORD_COLUMNS]))))
    if not parts:
        return pa.table({k: pa.array([], pa.int64()) for k in rule.key})
    found = pa.concat_tables(parts, promote_options="permissive")
    refuse_nulls(found, rule.key, where)
    return found.select(list(rule.key)).group_by(list(rule.key)).aggregate([])


def newest_changes(changes: "Table", snapshot_id: int, keys: "pa.Table", rule: UpsertRule, where: str) -> "pa.Table":
    """Each of ``keys``' newest change in snapshot ``snapshot_id`` (deletes included)."""
    import pyarrow as pa
    from pyiceberg.table.upsert_util import create_match_filter

    if keys.num_rows == 0:
        return changes.scan(snapshot_id=snapshot_id, limit=0).to_arrow()
    reader = changes.scan(snapshot_id=snapshot_id, row_filter=create_match_filter(keys, list(rule.key))) \
        .to_arrow_batch_reader()
    candidates = pa.Table.from_batches(list(reader), schema=reader.schema)
    check_changes(candidates, rule, where)
    return newest_per_key(candidates, rule)


def refresh(catalog, changes_ident: tuple[str, str], view_ident: tuple[str, str], rule: UpsertRule, where: str,
            location: str, partitions: Sequence[tuple[str, str]] = ()) -> Refreshed:
    """Bring the upserted table to the changes table's current snapshot (module docstring);
    ``location`` and ``partitions`` (``sink.partition_by``): a new upserted table's, which is
    partitioned as the changes table is, so that readers prune it the same way."""
    import pyarrow.compute as pc
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.table.upsert_util import create_match_filter

    changes = catalog.load_table(changes_ident)
    current = changes.current_snapshot()
    if current is None:
        return Refreshed(None, 0, 0, None)
    try:
        view = catalog.load_table(view_ident)
    except NoSuchTableError:
        view = None
    before = reflected(view)
    if before == current.snapshot_id:
        return Refreshed(before, 0, 0, None)
    keys = touched_keys(changes, before, current.snapshot_id, rule, where)
    newest = newest_changes(changes, current.snapshot_id, keys, rule, where)
    if rule.delete_column:
        deleted = pc.fill_null(newest.column(rule.delete_column), False)
        live = newest.filter(pc.invert(deleted))
    else:
        live = newest
    props = {CHANGES_SNAPSHOT: str(current.snapshot_id)}
    key = json.dumps(list(rule.key))
    if view is None:
        from offsetbatch.sinks.iceberg.schema import partition_spec

        tx = catalog.create_table_transaction(view_ident, schema=changes.schema(), location=location,
                                              properties={KEY_PROPERTY: key})
        partition_spec(tx, list(partitions))
    else:
        tx = view.transaction()
        with tx.update_schema() as update:
            update.union_by_name(changes.schema())
        if KEY_PROPERTY not in view.properties:  # upserted before the key was recorded: this key, checked since
            tx.set_properties({KEY_PROPERTY: key})
    if view is not None and keys.num_rows:
        tx.delete(create_match_filter(keys, list(rule.key)), snapshot_properties=props)
    tx.append(live.cast(tx.table_metadata.schema().as_arrow()), snapshot_properties=props)  # also when empty:
    # its snapshot carries the marker
    tx.commit_transaction()
    view = catalog.load_table(view_ident)
    log.info("%s: %d key(s) touched since changes snapshot %s; %d with a row now, %d without (snapshot %d)",
             where, keys.num_rows, before, live.num_rows, keys.num_rows - live.num_rows,
             view.current_snapshot().snapshot_id)
    return Refreshed(current.snapshot_id, keys.num_rows, live.num_rows, view.current_snapshot().snapshot_id)
