"""The postgres sink's upsert on real PostgreSQL (issue 44): a version decides which change of a key
the table shows, whatever order batches are committed or replayed in; deletes stay deleted; a key
missing from a replayed batch returns to its previous change.

A change stream of inserts, updates, deletes and re-inserts of the same keys over two partitions
and three batches is staged as the Spark job stages it (Parquet and a manifest) and committed
through the sink's hook inside the ledger's transaction (``publish_in_transaction``), as the commit
task does; replays are new batch ids committed onto the old output id. After each step the table
is read with psycopg2 and compared, row by row, with a model that applies the changes in offset
order. (The whole path through Airflow and Spark: ``test_postgres_sink.py``.)
"""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path

import psycopg2
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from offsetbatch.dag.retry_policy import is_permanent
from offsetbatch.errors import SinkSchemaError
from offsetbatch.jobspec import Manifest
from offsetbatch.ledger import Ledger
from offsetbatch.sinks.postgres import PostgresSettings, PostgresSink

pytestmark = pytest.mark.integration
TABLE = "public.accounts"

# (partition, offset, key, value, deleted): key k lives in partition k % 2, as Kafka's partitioner keeps it
BATCHES = {
    1: [(0, 0, 2, "a", False), (1, 0, 1, "a", False), (0, 1, 4, "a", False), (1, 1, 3, "a", False),
        (0, 2, 2, "b", False)],
    2: [(1, 2, 1, "b", False), (0, 3, 4, None, True), (1, 3, 3, "b", False), (0, 4, 6, "a", False)],
    3: [(0, 5, 4, "c", False), (1, 4, 3, None, True), (1, 5, 5, "a", False), (0, 6, 2, "c", False),
        (1, 6, 1, None, True)],
}


def _model(changes: list[tuple]) -> dict[int, tuple]:
    """Each key's newest change by offset (its one partition), applied in offset order."""
    table: dict[int, tuple] = {}
    for partition, offset, key, value, deleted in sorted(changes, key=lambda c: (c[0], c[1])):
        if deleted:
            table.pop(key, None)
        else:
            table[key] = (value, partition, offset)
    return table


class Table:
    """A sink on a fresh database, and a reader of its table that is not ours (psycopg2)."""

    def __init__(self, postgres, tmp_path: Path, **settings):
        self.url = postgres.create_database(f"pg_upsert_{uuid.uuid4().hex[:8]}")
        self.ledger = Ledger(self.url, create=True)
        self.sink = PostgresSink("upsert_check", PostgresSettings(**{
            "path": str(tmp_path / "staging"), "table": TABLE, "url": self.url, "mode": "upsert", "key": ["account"],
            "delete_column": "deleted", **settings}))
        self.next_batch = 1

    def commit(self, rows: list[tuple], output_id: int | None = None, version: list[int] | None = None) -> int:
        """Stage ``rows`` as a new batch and commit it onto ``output_id`` (itself: a new batch)."""
        batch_id, self.next_batch = self.next_batch, self.next_batch + 1
        cols = {"account": pa.array([r[2] for r in rows], pa.int64()), "balance": pa.array([r[3] for r in rows], pa.string()),
                "deleted": pa.array([r[4] for r in rows], pa.bool_()), "kafka_topic": ["t"] * len(rows),
                "kafka_partition": pa.array([r[0] for r in rows], pa.int32()),
                "kafka_offset": pa.array([r[1] for r in rows], pa.int64())}
        if version is not None:
            cols["lsn"] = pa.array(version, pa.int64())
        data = Path(self.sink.staging.staging_data(batch_id, "a"))
        data.mkdir(parents=True)
        pq.write_table(pa.table(cols), data / "part-0.parquet")
        Manifest(pipeline=self.sink.pipeline_name, output_id=output_id or batch_id, ranges=[], rows_in=len(rows),
                 rows_out=len(rows), rows_rejected=0, bytes_in=0, data_files=[str(data / "part-0.parquet")],
                 rejected_files=[], job_seconds=0, spark_version="none",
                 attempt="a").save(self.sink.staging.staging_manifest(batch_id, "a"))
        with self.ledger.lock(self.sink.pipeline_name) as conn:
            self.sink.publish_in_transaction(conn, batch_id, output_id or batch_id, "a", self.ledger.identity)
        return batch_id

    def retire(self, output_id: int) -> None:
        with self.ledger.lock(self.sink.pipeline_name) as conn:
            self.sink.retire_in_transaction(conn, output_id)

    def rows(self) -> dict[int, tuple]:
        u = sa.make_url(self.url)
        with psycopg2.connect(host=u.host, port=u.port, user=u.username, password=u.password, dbname=u.database) as c:
            with c.cursor() as cur:
                cur.execute(f"SELECT account, balance, kafka_partition, kafka_offset, deleted FROM {TABLE}")
                found = cur.fetchall()
        c.close()
        assert len(found) == len({r[0] for r in found}), "one row per key"
        assert not any(r[4] for r in found), "a delete is never a row"
        return {r[0]: (r[1], r[2], r[3]) for r in found}

    def close(self) -> None:
        self.ledger.dispose()


@pytest.fixture
def table(postgres, tmp_path):
    t = Table(postgres, tmp_path)
    yield t
    t.close()


def test_replays_in_every_order_leave_the_table_as_the_first_pass(postgres, tmp_path):
    first = Table(postgres, tmp_path / "first")
    seen: list[tuple] = []
    for n, rows in BATCHES.items():
        first.commit(rows)
        seen += rows
        assert first.rows() == _model(seen), f"after batch {n}"
    expected = first.rows()
    # updated (2), deleted and re-inserted (4), deleted (1, 3), inserted (5, 6)
    assert expected == {2: ("c", 0, 6), 4: ("c", 0, 5), 5: ("a", 1, 5), 6: ("a", 0, 4)}
    for order in itertools.permutations(BATCHES):
        for n in order:
            first.commit(BATCHES[n], output_id=n)
            assert first.rows() == expected, f"replaying {order}: after batch {n}"
    first.close()


def test_a_key_missing_from_a_replayed_batch_returns_to_its_previous_change(table):
    for rows in BATCHES.values():
        table.commit(rows)
    # batch 2's replay under a new transform: it no longer emits account 1's update, and it changes
    # account 6's value; account 1's newest change is batch 3's delete, so it stays deleted; 6 takes
    # the new value
    table.commit([r if r[2] != 6 else (0, 4, 6, "a2", False) for r in BATCHES[2] if r[2] != 1], output_id=2)
    assert table.rows() == {2: ("c", 0, 6), 4: ("c", 0, 5), 5: ("a", 1, 5), 6: ("a2", 0, 4)}
    # batch 3 retired (a reset): its changes leave the log; each key shows its change before batch 3
    # (4: batch 2's delete; 5: none)
    table.retire(3)
    assert table.rows() == {2: ("b", 0, 2), 3: ("b", 1, 3), 6: ("a2", 0, 4), 1: ("a", 1, 0)}


def test_a_delete_is_not_undone_by_replaying_an_older_batch(table):
    table.commit([(0, 0, 8, "a", False)])
    table.commit([(0, 1, 8, None, True)])
    table.commit([(0, 0, 8, "a", False)], output_id=1)
    assert table.rows() == {}
    table.commit([(0, 2, 8, "b", False)])  # re-inserted
    table.commit([(0, 1, 8, None, True)], output_id=2)  # the old delete replayed: older than the re-insert
    assert table.rows() == {8: ("b", 0, 2)}


def test_a_key_in_two_partitions_is_refused_without_a_version_column_and_ordered_by_it(postgres, tmp_path, table):
    table.commit([(0, 5, 9, "from p0", False)])
    before = table.rows()
    with pytest.raises(SinkSchemaError) as err:
        table.commit([(1, 3, 9, "from p1", False)])
    assert str(err.value) == (
        "pipeline upsert_check batch 2, table public.accounts: key (account=9) has changes in t/0 and t/1; offsets "
        "order a key's changes only within one partition, so which is newer is unknown. Nothing was written or "
        "committed; the batch stays planned. Set sink.version_column to a column of the transform's output that "
        "orders a key's changes (Debezium's source.lsn or ts_ms, an updated_at), then clear the spark_job task.")
    assert is_permanent(err.value) and table.rows() == before

    versioned = Table(postgres, tmp_path / "versioned", version_column="lsn")
    versioned.commit([(0, 5, 9, "lsn 20", False)], version=[20])
    versioned.commit([(1, 3, 9, "lsn 10", False)], version=[10])  # later batch, older change
    assert versioned.rows() == {9: ("lsn 20", 0, 5)}
    versioned.commit([(1, 4, 9, "lsn 30", False)], version=[30])
    versioned.commit([(0, 5, 9, "lsn 20", False)], output_id=1, version=[20])  # replay of the first
    assert versioned.rows() == {9: ("lsn 30", 1, 4)}
    versioned.close()


def test_a_null_key_is_refused_naming_the_record(table):
    table.commit([(0, 0, 1, "a", False)])
    with pytest.raises(SinkSchemaError) as err:
        table.commit([(0, 1, 2, "b", False), (0, 2, None, "c", False)])
    assert ("pipeline upsert_check batch 2, table public.accounts: the row of t/0 offset 2 has NULL in account, which "
            "the upsert needs") in str(err.value)
    assert "WHERE account IS NOT NULL" in str(err.value) and is_permanent(err.value)
    assert table.rows() == {1: ("a", 0, 0)}


def test_a_table_upserted_before_the_change_log_gets_one_seeded_from_its_rows(table):
    """0.2's upsert table (no ``_changes``): the first commit seeds the log with the table's rows, so
    a replay of an older batch cannot move those keys back."""
    table.commit([(0, 0, 1, "old", False), (1, 0, 2, "kept", False)])
    table.commit([(0, 1, 1, "newer", False)])
    engine = sa.create_engine(table.url)
    with engine.begin() as c:
        c.execute(sa.text(f"DROP TABLE {TABLE}_changes"))
    engine.dispose()
    table.commit([(0, 0, 1, "old", False), (1, 0, 2, "kept", False)], output_id=1)  # replay of batch 1
    # key 1's change in the replayed batch is older than the one the table held
    assert table.rows() == {1: ("newer", 0, 1), 2: ("kept", 1, 0)}


def test_a_new_batch_is_checked_against_the_table_row_or_for_a_deleted_key_the_log(postgres, tmp_path, table):
    """A batch's first commit compares each key's newest change with the table's row, and only a
    key without a row (never seen, or deleted) with the log: a delete's version outlives the row."""
    versioned = Table(postgres, tmp_path / "versioned", version_column="lsn")
    versioned.commit([(0, 0, 7, "a", False)], version=[10])
    versioned.commit([(0, 1, 7, None, True)], version=[30])
    versioned.commit([(1, 0, 7, "older than the delete", False)], version=[20])
    assert versioned.rows() == {}
    versioned.commit([(1, 1, 7, "newer", False)], version=[40])
    versioned.commit([(0, 2, 7, None, True)], version=[35])  # a delete older than the row: no effect
    assert versioned.rows() == {7: ("newer", 1, 1)}
    versioned.commit([(0, 3, 7, "same version, later offset", False), (0, 4, 8, "new key", False)], version=[40, 1])
    assert versioned.rows() == {7: ("same version, later offset", 0, 3), 8: ("new key", 0, 4)}
    versioned.close()

    table.commit([(0, 0, 11, "a", False)])
    table.commit([(0, 1, 11, None, True)])
    with pytest.raises(SinkSchemaError, match=r"key \(account=11\) has changes in t/0 and t/1"):
        table.commit([(1, 0, 11, "b", False)])  # no row to compare with: the log's delete is in t/0
    assert table.rows() == {}


def test_maintenance_trims_the_log_to_what_a_replay_can_still_need(postgres, tmp_path):
    """Once the ledger has summarized batches 1 and 2 (``ledger.history``; here its
    summary row is written directly, the sink's commits having no ledger batch rows), they can no
    longer be replayed: of their changes only each key's newest can still decide, when a kept batch
    holding a newer one is replayed or retired. The pass deletes the rest, a delete included when
    a newer change supersedes it, and keeps a delete that is a key's newest."""
    from datetime import datetime, timezone

    from offsetbatch.sinks.maintenance import Horizon

    t = Table(postgres, tmp_path, version_column="lsn")
    t.commit([(0, 0, 1, "a", False), (1, 0, 2, "x", False), (0, 1, 5, "e", False)], version=[10, 11, 12])
    t.commit([(0, 2, 1, "b", False), (1, 1, 2, None, True), (1, 2, 3, "c", False), (0, 3, 5, None, True)],
             version=[20, 21, 22, 13])
    t.commit([(0, 4, 1, "kept", False)], version=[30])
    before = t.rows()
    assert before == {1: ("kept", 0, 4), 3: ("c", 1, 2)}
    engine = sa.create_engine(t.url)
    with engine.begin() as c:
        c.execute(sa.text("INSERT INTO ob_history_batches (pipeline, batches, replays, first_batch_id, last_batch_id, "
                          "updated_at) VALUES ('upsert_check', 2, 0, 1, 2, now())"))
    now = datetime.now(timezone.utc)
    [action] = t.sink.maintenance(None, Horizon(now, now, now, now))
    assert action.apply() == {"changes": 3}  # lsn 10 (key 1), 11 (key 2), 12 (key 5: its delete, 13, is its newest)
    with engine.connect() as c:
        log = sorted(c.execute(sa.text(f"SELECT account, lsn, deleted FROM {TABLE}_changes")).all())
    engine.dispose()
    assert log == [(1, 20, False), (1, 30, False), (2, 21, True), (3, 22, False), (5, 13, True)]
    assert t.rows() == before
    assert action.apply() == {"changes": 0}
    t.retire(3)  # the kept batch goes: key 1 back to its newest summarized change
    assert t.rows() == {1: ("b", 0, 2), 3: ("c", 1, 2)}
    t.commit([(1, 3, 2, "older than its delete", False), (0, 5, 5, "older than its delete", False)], version=[15, 11])
    assert t.rows() == {1: ("b", 0, 2), 3: ("c", 1, 2)}  # the kept deletes still outrank them
    t.close()


def _plan_with(sink: PostgresSink):
    """The plan task (``dag.tasks.plan_step``) of a pipeline writing through ``sink``: Kafka answers
    for the topic (a stand-in: the subject here is the sink's check on a real table), and opening
    the ledger is recorded, so the test sees the plan stop before it."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    from offsetbatch.dag.tasks import plan_step

    opened: list[str] = []

    @contextmanager
    def kafka():
        yield SimpleNamespace(partitions=lambda *a, **k: set())

    cfg = SimpleNamespace(name=sink.pipeline_name, airflow=SimpleNamespace(schedule="0 * * * *"),
                          kafka=SimpleNamespace(topics=["accounts"], pattern=None), reads_topic=lambda t: t == "accounts")
    pipeline = SimpleNamespace(cfg=cfg, sink=sink, kafka=kafka, ledger=lambda create=False: opened.append("ledger"))
    try:
        plan_step(pipeline, "offsetbatch_upsert_check", "manual__1", None, None, "manual", "tester")
    finally:
        assert opened == [], "the plan opened the ledger"


@pytest.mark.parametrize("settings, says", [
    ({"mode": "upsert", "key": ["account", "balance"], "delete_column": "deleted"},
     r"table public\.accounts is upserted by key \(account\), but sink\.key is now \[account, balance\]\. Nothing "
     r"was planned or changed: the table and its change log public\.accounts_changes would be keyed two ways\. Set "
     r"sink\.key back to \[account\], or use a new key in a new table"),
    ({}, r"table public\.accounts is an upserted table, one row per key \(account\); append mode .* cannot write "
         r"into it"),
], ids=["key changed", "upsert to append"])
def test_a_changed_key_or_mode_is_refused_by_the_plan_before_any_job_and_by_the_commit(table, tmp_path, settings,
                                                                                       says):
    """Changing ``sink.key`` from [account] to [account, balance] on an upserted table (or going back
    to append) fails the plan task at once, naming the table's key and the config's, before the
    ledger is opened and so before any Spark job; a commit staged anyway is refused before its
    transaction, with the same message, and not retried (no advice to add a second UNIQUE key)."""
    table.commit(BATCHES[1])
    before = table.rows()
    changed = PostgresSink("upsert_check", PostgresSettings(path=str(tmp_path / "staging"), table=TABLE,
                                                            url=table.url, **settings))
    with pytest.raises(SinkSchemaError, match=says) as refused:
        _plan_with(changed)
    assert is_permanent(refused.value) and "ADD UNIQUE" not in str(refused.value)
    table.sink = changed
    with pytest.raises(SinkSchemaError, match=says):
        table.commit(BATCHES[2])
    assert table.rows() == before


def test_an_append_table_switched_to_upsert_is_refused_by_the_plan(postgres, tmp_path):
    appended = Table(postgres, tmp_path, mode="append", key=[], delete_column=None)
    try:
        appended.commit(BATCHES[1])
        upserting = PostgresSink("upsert_check", PostgresSettings(
            path=str(tmp_path / "staging"), table=TABLE, url=appended.url, mode="upsert", key=["account"]))
        with pytest.raises(SinkSchemaError, match=r"table public\.accounts was written in append mode \(one row per "
                                                  r"record\); mode upsert with key \[account\] cannot take over its "
                                                  r"rows\. Nothing was planned or changed"):
            _plan_with(upserting)
        appended.sink.check_writable()  # its own mode: no refusal
    finally:
        appended.close()
