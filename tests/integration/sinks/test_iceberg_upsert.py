"""The Iceberg upsert's core (issue 44), on a real pyiceberg SQL catalog and warehouse, without
Spark: a table of changes written the way the append sink writes one (a batch's snapshot replaces
its rows), and the upserted table ``refresh`` derives from it. After every publish, replay (in any
order, with the same or a changed output) and interrupted refresh, the upserted table, read by
pyiceberg's own scan, equals a model applied in version order."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo

from offsetbatch.dag.retry_policy import is_permanent
from offsetbatch.errors import SinkSchemaError
from offsetbatch.sinks.iceberg import upsert
from offsetbatch.sinks.iceberg.upsert import UpsertRule

pytestmark = pytest.mark.integration
CHANGES, VIEW = ("cdc", "accounts_changes"), ("cdc", "accounts")
RULE = UpsertRule(key=["id"], version_column="lsn", delete_column="deleted")

# (id, name, deleted, lsn, partition): three batches of inserts, updates, deletes and re-inserts over two
# partitions, a key's changes in both (the version orders them)
BATCHES = {
    1: [(1, "a1", False, 10, 0), (2, "b1", False, 11, 1), (3, "c1", False, 12, 0), (4, "d1", False, 13, 1)],
    2: [(1, "a2", False, 20, 1), (2, None, True, 21, 0), (5, "e2", False, 22, 0), (3, "c2", False, 23, 1)],
    3: [(2, "b3", False, 30, 1), (4, None, True, 31, 0), (1, "a3", False, 19, 0), (6, "f3", False, 32, 1)],
}


def _rows(output_id: int, changes: list[tuple]) -> pa.Table:
    offsets = itertools.count(output_id * 100)
    return pa.table({
        "id": pa.array([c[0] for c in changes], pa.int64()), "name": pa.array([c[1] for c in changes], pa.string()),
        "deleted": pa.array([c[2] for c in changes], pa.bool_()), "lsn": pa.array([c[3] for c in changes], pa.int64()),
        "kafka_topic": pa.array(["accounts"] * len(changes)),
        "kafka_partition": pa.array([c[4] for c in changes], pa.int32()),
        "kafka_offset": pa.array([next(offsets) for _ in changes], pa.int64()),
        "batch_id": pa.array([output_id] * len(changes), pa.int64()),
    })


def _model(batches: dict[int, list[tuple]]) -> dict[int, tuple]:
    newest: dict[int, tuple] = {}
    for change in sorted((c for cs in batches.values() for c in cs), key=lambda c: c[3]):
        newest[change[0]] = change
    return {k: (c[1], c[3]) for k, c in newest.items() if not c[2]}


class Tables:
    def __init__(self, tmp_path, partitions: tuple = ()):
        self.partitions = partitions  # sink.partition_by, as (transform, column)
        self.catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
        self.catalog.create_namespace("cdc")
        self.location = f"file://{tmp_path}/wh/cdc/accounts"
        self.published: dict[int, list[tuple]] = {}

    def publish(self, output_id: int, changes: list[tuple]) -> None:
        """What the append sink's snapshot does: the batch's rows replace its earlier output."""
        rows = _rows(output_id, changes)
        if not self.catalog.table_exists(CHANGES):
            self.catalog.create_table(CHANGES, schema=rows.schema)
        table = self.catalog.load_table(CHANGES)
        tx = table.transaction()
        tx.delete(EqualTo("batch_id", output_id))
        tx.append(rows.cast(table.schema().as_arrow()))
        tx.commit_transaction()
        self.published[output_id] = changes

    def refresh(self) -> upsert.Refreshed:
        return upsert.refresh(self.catalog, CHANGES, VIEW, RULE, "pipeline accounts", self.location, self.partitions)

    def view(self) -> dict[int, tuple]:
        rows = self.catalog.load_table(VIEW).scan().to_arrow().to_pylist()
        assert len({r["id"] for r in rows}) == len(rows), "a key has two rows"
        return {r["id"]: (r["name"], r["lsn"]) for r in rows}


@pytest.fixture
def tables(tmp_path):
    return Tables(tmp_path)


@pytest.mark.parametrize("partitions", [(), (("identity", "kafka_partition"),)], ids=["unpartitioned", "partitioned"])
def test_each_batch_then_replays_in_every_order_leave_the_model(tmp_path, partitions):
    """Partitioned (``sink.partition_by``) like the changes table, a key's row moves between
    partitions as its newest change does (key 1: partition 0, then 1)."""
    tables = Tables(tmp_path, partitions)
    for output_id, changes in BATCHES.items():
        tables.publish(output_id, changes)
        tables.refresh()
        assert tables.view() == _model(tables.published)
    first_pass = tables.view()
    assert first_pass == {1: ("a2", 20), 2: ("b3", 30), 3: ("c2", 23), 5: ("e2", 22), 6: ("f3", 32)}
    for order in itertools.permutations([3, 1, 2]):
        for output_id in order:
            tables.publish(output_id, BATCHES[output_id])
            tables.refresh()
            assert tables.view() == first_pass, order  # a replay moves no key back in time
    view = tables.catalog.load_table(VIEW)
    assert [(f.name, str(f.transform)) for f in view.spec().fields] == \
        [(column, transform) for transform, column in partitions]
    if partitions:  # each file holds one partition's rows, and says which
        for task in view.scan().plan_files():
            with view.io.new_input(task.file.file_path).open() as f:
                values = set(pq.read_table(f, columns=["kafka_partition"]).column(0).to_pylist())
            assert values == {task.file.partition[0]}, (task.file.file_path, values)


def test_a_replay_with_a_changed_output_returns_a_missing_key_to_its_previous_change(tables):
    for output_id, changes in BATCHES.items():
        tables.publish(output_id, changes)
        tables.refresh()
    changed = [c for c in BATCHES[2] if c[0] != 3]  # the transform now drops key 3's update
    tables.publish(2, changed)
    tables.refresh()
    assert tables.view()[3] == ("c1", 12)
    assert tables.view() == _model(tables.published)
    tables.publish(3, [c for c in BATCHES[3] if c[0] != 2])  # key 2's delete (batch 2) stands again
    tables.refresh()
    assert 2 not in tables.view() and tables.view() == _model(tables.published)


def test_a_delete_is_not_undone_by_replaying_an_older_batch(tables):
    for output_id, changes in BATCHES.items():
        tables.publish(output_id, changes)
        tables.refresh()
    assert 4 not in tables.view()
    tables.publish(1, BATCHES[1])  # holds key 4's insert, older than batch 3's delete
    tables.refresh()
    assert 4 not in tables.view()


def test_an_interrupted_refresh_is_finished_by_the_next(tables, monkeypatch):
    tables.publish(1, BATCHES[1])
    tables.refresh()
    tables.publish(2, BATCHES[2])
    from pyiceberg.table import Transaction

    real = Transaction.commit_transaction

    def killed(self):
        raise KeyboardInterrupt("killed before the catalog commit")
    monkeypatch.setattr(Transaction, "commit_transaction", killed)
    with pytest.raises(KeyboardInterrupt):
        tables.refresh()
    monkeypatch.setattr(Transaction, "commit_transaction", real)
    assert tables.view() == _model({1: BATCHES[1]})  # still the first snapshot's
    done = tables.refresh()
    assert done.touched == 4 and tables.view() == _model(tables.published)
    assert tables.refresh().snapshot_id is None  # nothing left to do


def test_without_a_version_a_key_in_two_partitions_is_refused(tables):
    tables.publish(1, BATCHES[1])
    tables.publish(2, BATCHES[2])
    with pytest.raises(SinkSchemaError, match=r"key \(id=1\) has changes in more than one partition.*version_column"):
        upsert.refresh(tables.catalog, CHANGES, VIEW, UpsertRule(key=["id"], delete_column="deleted"),
                       "pipeline accounts", tables.location)


def test_a_null_key_is_refused_naming_the_record(tables):
    """No key filter finds a NULL key again: refused, not left out of the table."""
    tables.publish(1, [(1, "a", False, 5, 0), (None, "b", False, 6, 0)])
    with pytest.raises(SinkSchemaError, match=r"accounts/0 offset 101 has NULL in id"):
        tables.refresh()


def test_a_null_version_is_refused_naming_the_record(tables):
    tables.publish(1, [(1, "a", False, None, 0)])
    with pytest.raises(SinkSchemaError, match=r"accounts/0 offset 100 has NULL in lsn"):
        tables.refresh()


def test_a_table_written_in_one_mode_or_upserted_by_another_key_is_refused_naming_both(tables):
    tables.publish(1, BATCHES[1])
    tables.refresh()
    view = tables.catalog.load_table(VIEW)
    changes = tables.catalog.load_table(CHANGES)  # written as an append table is
    assert view.properties[upsert.KEY_PROPERTY] == '["id"]'  # recorded by the refresh that created it
    upsert.check_mode(view, True, "pipeline accounts", ["id"])
    upsert.check_mode(changes, False, "pipeline accounts")
    with pytest.raises(SinkSchemaError, match=r"written in append mode .* upsert into a new table"):
        upsert.check_mode(changes, True, "pipeline accounts", ["id"])
    with pytest.raises(SinkSchemaError, match=r"is an upserted table .* Set mode: upsert again"):
        upsert.check_mode(view, False, "pipeline accounts")
    with pytest.raises(SinkSchemaError, match=r"upserted by key \(id\), but sink.key is now \[id, name\]\. Nothing "
                                              r"was planned .* Set sink.key back to \[id\]") as refused:
        upsert.check_mode(view, True, "pipeline accounts", ["id", "name"])
    assert is_permanent(refused.value)


def test_a_table_upserted_before_its_key_was_recorded_records_it_at_its_next_refresh(tables):
    tables.publish(1, BATCHES[1])
    tables.refresh()
    view = tables.catalog.load_table(VIEW)
    with view.transaction() as tx:  # as an offsetbatch before the check left it
        tx.remove_properties(upsert.KEY_PROPERTY)
    upsert.check_mode(tables.catalog.load_table(VIEW), True, "pipeline accounts", ["id", "name"])  # nothing to compare
    tables.publish(2, BATCHES[2])
    tables.refresh()
    assert tables.catalog.load_table(VIEW).properties[upsert.KEY_PROPERTY] == '["id"]'
    assert tables.view() == _model({1: BATCHES[1], 2: BATCHES[2]})
