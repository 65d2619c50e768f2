"""The delta sink's upsert: a table a version decides, merged from the table of its changes (the
iceberg sink's design, with delta-rs's ``MERGE`` as the last step; docs/architecture.md).

* ``<table>_changes``: every change, written exactly as the append sink writes a table (one commit
  per batch with its marker; a replay replaces its batch's rows);
* ``<table>``: per key, the newest change of ``<table>_changes`` unless that change is a delete. Its
  application transaction ``offsetbatch/<pipeline>/changes`` is the changes version it reflects;
  its description names its key (``offsetbatch upsert key: [...]``).

``refresh`` brings ``<table>`` from the changes version it reflects, V0, to the current one, V:

1. the files V has and V0 had not, and those V0 had and V has not: the keys they hold are the
   touched keys (a replay's old files are among the removed ones, so a key missing from its new
   output is touched too);
2. each touched key's newest change among V's files (``keyed.newest_per_key``: the greatest
   ``version_column``, then offset, partition, topic), or none left;
3. one ``MERGE`` on the key: a key whose newest change is a delete, or that has no change left, is
   deleted; the others are updated or inserted; the commit records V.

A crash leaves ``<table>`` at V0 (a Delta commit is one log entry) and the next publish does it
again. Because the newest change is recomputed from every change of a key, the order batches are
replayed in never matters, and a deleted key stays deleted until a newer change brings it back.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from offsetbatch import storage
from offsetbatch.errors import SinkError, SinkSchemaError
from offsetbatch.sinks.delta import markers
from offsetbatch.sinks.delta.table import CONFIGURATION, delta_uri, hooks
from offsetbatch.sinks.keyed import RECORD_COLUMNS, UpsertRule, check_changes, newest_per_key, refuse_nulls

if TYPE_CHECKING:
    from offsetbatch.sinks.delta.table import TableOwner
    import pyarrow as pa
    from deltalake import DeltaTable

    from offsetbatch.sinks.delta.settings import DeltaSettings

log = logging.getLogger(__package__)

KEY_PREFIX = "offsetbatch upsert key: "
DROP = "_offsetbatch_drop"  # the merge source's flag: the key has no row any more
MERGE_ATTEMPTS = 5


def key_of(table: "DeltaTable | None") -> list[str] | None:
    """The key an upserted table was created with (``None``: not an upserted table)."""
    description = table.metadata().description if table is not None else None
    return json.loads(description[len(KEY_PREFIX):]) if description and description.startswith(KEY_PREFIX) else None


def check_mode(table: "DeltaTable | None", settings: "DeltaSettings", where: str) -> None:
    """A table written in one mode is refused by the other, and an upserted table by another key,
    naming both (the plan, before any Spark job; the commit, before the ledger transaction)."""
    if table is None:
        return
    was = key_of(table)
    new_table = ("Give the sink a new table (sink.table) and fill it with a rewind: README, *Change data capture*, "
                 "changing the key")
    if settings.upserts and was is None:
        raise SinkSchemaError(
            f"{where}: the table was written in append mode (one row per record); mode upsert merges it from "
            f"<table>_changes and cannot take over its rows. Nothing was planned or committed; the batch stays "
            f"planned. Set mode back to append, or upsert into a new table. {new_table}.")
    if not settings.upserts and was is not None:
        raise SinkSchemaError(
            f"{where}: the table is an upserted table (one row per key, merged from <table>_changes); append mode "
            f"cannot write into it. Nothing was planned or committed; the batch stays planned. Set mode: upsert "
            f"again, or give the sink a new table.")
    if settings.upserts and list(was) != list(settings.key):
        raise SinkSchemaError(
            f"{where}: the table is upserted by key ({', '.join(was)}), but sink.key is now [{', '.join(settings.key)}]. "
            f"Nothing was planned or committed. Set sink.key back to [{', '.join(was)}], or use a new key in a new "
            f"table. {new_table}.")


def _read(paths: list[str], columns: list[str] | None = None) -> "pa.Table | None":
    """The rows of a table's files (delta-rs names them ``s3://…`` or by local path)."""
    import pyarrow as pa

    parts = [storage.read_parquet(path, columns) for path in paths]
    return pa.concat_tables(parts, promote_options="permissive") if parts else None


def touched_keys(before: list[str], after: list[str], rule: UpsertRule, where: str) -> "pa.Table":
    """The distinct keys of the files that differ between two versions of the changes table."""
    import pyarrow as pa

    differing = sorted(set(before) ^ set(after))
    found = _read(differing, list(dict.fromkeys([*rule.key, *RECORD_COLUMNS])))
    if found is None:
        return pa.table({k: pa.array([], pa.int64()) for k in rule.key})
    refuse_nulls(found, rule.key, where)
    return found.select(list(rule.key)).group_by(list(rule.key)).aggregate([])


def merge_source(files: list[str], keys: "pa.Table", rule: UpsertRule, where: str) -> "pa.Table | None":
    """Per touched key its newest change, ``DROP`` true where that is a delete or there is none."""
    import pyarrow.compute as pc

    if keys.num_rows == 0:
        return None
    rows = _read(files)
    candidates = rows.join(keys, list(rule.key), join_type="left semi") if rows is not None else None
    if candidates is None or candidates.num_rows == 0:
        import pyarrow as pa

        return keys.append_column(DROP, pa.array([True] * keys.num_rows))
    check_changes(candidates, rule, where)
    newest = newest_per_key(candidates, rule)
    source = keys.join(newest, list(rule.key), join_type="left outer")
    drop = pc.is_null(source.column("kafka_offset"))
    if rule.delete_column:
        drop = pc.or_(drop, pc.fill_null(source.column(rule.delete_column), False))
    return source.append_column(DROP, drop)


def refresh(sink: "TableOwner", where: str) -> None:
    """Bring the upserted table to the changes table's current version (module docstring)."""
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError

    settings = sink.settings
    rule = UpsertRule(settings.key, settings.version_column, settings.delete_column)
    app = f"{markers.app_id(sink.pipeline_name)}/changes"
    for attempt_no in range(1, MERGE_ATTEMPTS + 1):
        changes = sink.open(settings.marked_table)
        if changes is None:
            return
        current = changes.version()
        view = sink.open(settings.table)
        before = view.transaction_version(app) if view is not None else None
        if before is not None and before >= current:
            return
        old = (DeltaTable(delta_uri(settings.marked_table), version=before, storage_options=sink.options).file_uris()
               if before is not None else [])
        now = changes.file_uris()
        keys = touched_keys(old, now, rule, where)
        source = merge_source(now, keys, rule, where)
        commit = CommitProperties(max_commit_retries=0, app_transactions=[Transaction(app, current)],
                                  custom_metadata={"offsetbatch.changes-version": str(current)})
        try:
            if view is None:
                import pyarrow.compute as pc

                live = source.filter(pc.invert(source.column(DROP))).drop_columns([DROP]) if source is not None \
                    else _read(now)
                if live is None:
                    return
                write_deltalake(delta_uri(settings.table), _nullable(live), mode="append",
                                partition_by=settings.partition_by or None, storage_options=sink.options,
                                description=KEY_PREFIX + json.dumps(list(settings.key)), configuration=CONFIGURATION,
                                commit_properties=commit, post_commithook_properties=hooks())
            elif source is None:
                return  # nothing touched: the next change's merge records the version
            else:
                on = " AND ".join(f't."{k}" = s."{k}"' for k in rule.key)
                columns = {c: f's."{c}"' for c in source.column_names if c != DROP}
                metrics = view.merge(_nullable(source), on, source_alias="s", target_alias="t", merge_schema=True,
                                     commit_properties=commit, post_commithook_properties=hooks()) \
                    .when_matched_delete(predicate=f's."{DROP}"') \
                    .when_matched_update(columns, predicate=f'NOT s."{DROP}"') \
                    .when_not_matched_insert(columns, predicate=f'NOT s."{DROP}"').execute()
                log.info("%s: %d key(s) touched since changes version %s: %d inserted, %d updated, %d deleted "
                         "(changes version %d)", where, keys.num_rows, before, metrics.get("num_target_rows_inserted", 0),
                         metrics.get("num_target_rows_updated", 0), metrics.get("num_target_rows_deleted", 0), current)
            return
        except CommitFailedError as exc:
            if attempt_no == MERGE_ATTEMPTS:
                raise SinkError(f"{where}: {MERGE_ATTEMPTS} merges lost to other writers ({exc}); the next publish "
                                f"merges again") from exc
            log.warning("%s: another writer committed first (%s); merging again", where, exc)


def _nullable(table: "pa.Table") -> "pa.Table":
    """Every column nullable: a key deleted by a later change leaves no row to hold a value."""
    import pyarrow as pa

    return table.cast(pa.schema([f.with_nullable(True) for f in table.schema]))
