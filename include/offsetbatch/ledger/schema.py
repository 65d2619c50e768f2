"""Ledger tables and their versioned migrations, applied by the project (never by hand).

``ob_schema_version`` holds the applied version; ``migrate`` applies what is missing, in order,
each step in its own transaction. A new version appends to ``MIGRATIONS``; existing steps never
change: a step that adds columns checks which exist, because step 1 creates tables from the
current definitions.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

pipelines = sa.Table(
    "ob_pipelines", metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

batches = sa.Table(
    "ob_batches", metadata,
    sa.Column("pipeline", sa.String(128), primary_key=True),
    sa.Column("batch_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("dag_id", sa.String(250)),
    sa.Column("run_id", sa.String(250)),
    sa.Column("data_interval_start", sa.DateTime(timezone=True)),
    sa.Column("data_interval_end", sa.DateTime(timezone=True)),
    sa.Column("planned_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("committed_at", sa.DateTime(timezone=True)),
    sa.Column("published_at", sa.DateTime(timezone=True)),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("committed_attempt", sa.String(64)),
    sa.Column("rows_in", sa.BigInteger),
    sa.Column("rows_out", sa.BigInteger),
    sa.Column("rows_rejected", sa.BigInteger),
    sa.Column("bytes_in", sa.BigInteger),
    sa.Column("job_seconds", sa.Float),
    sa.Column("commit_seconds", sa.Float),
    sa.Column("output_path", sa.Text),
    # v2: a replay re-reads the ranges of ``target_batch_id`` and replaces that batch's output; a
    # batch rewound over by a reset is ``superseded`` until ``superseded_by`` re-reads its ranges.
    sa.Column("target_batch_id", sa.BigInteger),
    sa.Column("superseded_by", sa.BigInteger),
    # v3: records between the frontier and the log end when an incremental batch was planned (the
    # lag-over-time chart of the UI), and an index for "last 24 h" figures.
    sa.Column("lag_at_plan", sa.BigInteger),
    # v4: the Airflow run type of the run that planned the batch (scheduled, manual, backfill, ...)
    sa.Column("run_type", sa.String(32)),
    sa.Index("ix_ob_batches_status", "pipeline", "status"),
    # v6: the open batches a plan and a commit look up, in id order, without walking a year of
    # history: SQLite walks the primary key for ``ORDER BY batch_id`` otherwise (42 ms at 100,000
    # batches, docs/benchmarks.md, *Growth*). Partial: they hold the few open rows only.
    sa.Index("ix_ob_batches_planned", "pipeline", "batch_id",
             sqlite_where=sa.text("status = 'planned'"), postgresql_where=sa.text("status = 'planned'")),
    sa.Index("ix_ob_batches_superseded", "pipeline", "batch_id",
             sqlite_where=sa.text("status = 'superseded'"), postgresql_where=sa.text("status = 'superseded'")),
    sa.Index("ix_ob_batches_unpublished", "pipeline", "batch_id",
             sqlite_where=sa.text("published_at IS NULL"), postgresql_where=sa.text("published_at IS NULL")),
    sa.Index("ix_ob_batches_superseded_by", "pipeline", "superseded_by",
             sqlite_where=sa.text("superseded_by IS NOT NULL"), postgresql_where=sa.text("superseded_by IS NOT NULL")),
    sa.Index("ix_ob_batches_committed", "pipeline", "committed_at"),
    sa.Index("ix_ob_batches_run", "pipeline", "run_id"),
    sa.Index("ix_ob_batches_target", "pipeline", "target_batch_id"),
)

ranges = sa.Table(
    "ob_ranges", metadata,
    sa.Column("pipeline", sa.String(128), primary_key=True),
    sa.Column("batch_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("topic", sa.String(249), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("from_offset", sa.BigInteger, nullable=False),
    sa.Column("until_offset", sa.BigInteger, nullable=False),
    sa.Column("frontier_before", sa.BigInteger),
    sa.Column("rows_read", sa.BigInteger),
    sa.Column("rows_rejected", sa.BigInteger),
    sa.CheckConstraint("until_offset > from_offset", name="ck_ob_ranges_nonempty"),
    sa.Index("ix_ob_ranges_tp", "pipeline", "topic", "partition", "from_offset"),
)

frontier = sa.Table(
    "ob_frontier", metadata,
    sa.Column("pipeline", sa.String(128), primary_key=True),
    sa.Column("topic", sa.String(249), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("start_offset", sa.BigInteger, nullable=False),
    sa.Column("next_offset", sa.BigInteger, nullable=False),
    sa.Column("batch_id", sa.BigInteger),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

gaps = sa.Table(
    "ob_gaps", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("pipeline", sa.String(128), nullable=False),
    sa.Column("topic", sa.String(249), nullable=False),
    sa.Column("partition", sa.Integer, nullable=False),
    sa.Column("from_offset", sa.BigInteger, nullable=False),
    sa.Column("until_offset", sa.BigInteger, nullable=False),
    sa.Column("batch_id", sa.BigInteger),
    sa.Column("reason", sa.String(64), nullable=False),
    sa.Column("detected_at", sa.DateTime(timezone=True), nullable=False),
    sa.Index("ix_ob_gaps_tp", "pipeline", "topic", "partition"),
)

events = sa.Table(
    "ob_events", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("pipeline", sa.String(128), nullable=False),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("actor", sa.String(250)),
    sa.Column("batch_id", sa.BigInteger),
    sa.Column("detail", sa.JSON),
    sa.Index("ix_ob_events_pipeline", "pipeline", "at"),
)

# v5: the ledger's identity, created once; a table records the identity of the ledger that owns it
ledger_info = sa.Table(
    "ob_ledger", metadata,
    sa.Column("ledger_id", sa.String(36), primary_key=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

# v6: bounded history (``ledger.history``). Batches past ``maintenance.ledger_retain`` are
# deleted with their ranges and folded into one row per partition (the offsets they read) and one
# row per pipeline (how many, which ids, their totals): both bounded whatever the history's length.
history = sa.Table(
    "ob_history", metadata,
    sa.Column("pipeline", sa.String(128), primary_key=True),
    sa.Column("topic", sa.String(249), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("from_offset", sa.BigInteger, nullable=False),     # first offset a summarized range read
    sa.Column("until_offset", sa.BigInteger, nullable=False),    # end of the last summarized range
    sa.Column("batches", sa.BigInteger, nullable=False),         # summarized batches with a range here
    sa.Column("first_batch_id", sa.BigInteger, nullable=False),
    sa.Column("last_batch_id", sa.BigInteger, nullable=False),
    sa.Column("first_committed_at", sa.DateTime(timezone=True)),
    sa.Column("last_committed_at", sa.DateTime(timezone=True)),
    sa.Column("rows_read", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("rows_rejected", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

history_batches = sa.Table(
    "ob_history_batches", metadata,
    sa.Column("pipeline", sa.String(128), primary_key=True),
    sa.Column("batches", sa.BigInteger, nullable=False),         # every summarized batch, replays included
    sa.Column("replays", sa.BigInteger, nullable=False),
    sa.Column("first_batch_id", sa.BigInteger, nullable=False),
    sa.Column("last_batch_id", sa.BigInteger, nullable=False),   # batch ids never go below this again
    sa.Column("first_committed_at", sa.DateTime(timezone=True)),
    sa.Column("last_committed_at", sa.DateTime(timezone=True)),
    sa.Column("rows_in", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("rows_out", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("rows_rejected", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("last_output_path", sa.Text),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

schema_version = sa.Table(
    "ob_schema_version", metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
)


def _v1(conn: sa.Connection) -> None:
    for table in (pipelines, batches, ranges, frontier, gaps, events):  # ob_ledger comes with v5
        table.create(conn, checkfirst=True)


def _v2(conn: sa.Connection) -> None:
    """Replays and rewinds (issue: backfills, manual triggers and offset operations)."""
    have = {c["name"] for c in sa.inspect(conn).get_columns("ob_batches")}
    for name in ("target_batch_id", "superseded_by"):
        if name not in have:
            conn.execute(sa.text(f"ALTER TABLE ob_batches ADD COLUMN {name} BIGINT"))
    next(i for i in batches.indexes if i.name == "ix_ob_batches_target").create(conn, checkfirst=True)


def _v3(conn: sa.Connection) -> None:
    """Lag history and the committed-at index (issue: Airflow UI plugin)."""
    if "lag_at_plan" not in {c["name"] for c in sa.inspect(conn).get_columns("ob_batches")}:
        conn.execute(sa.text("ALTER TABLE ob_batches ADD COLUMN lag_at_plan BIGINT"))
    next(i for i in batches.indexes if i.name == "ix_ob_batches_committed").create(conn, checkfirst=True)


def _v4(conn: sa.Connection) -> None:
    """The run type next to each batch (issue: backfills that meet manual runs)."""
    if "run_type" not in {c["name"] for c in sa.inspect(conn).get_columns("ob_batches")}:
        conn.execute(sa.text("ALTER TABLE ob_batches ADD COLUMN run_type VARCHAR(32)"))


def _v5(conn: sa.Connection) -> None:
    """The ledger's identity (issue: nothing lost by misconfiguration)."""
    import uuid
    from datetime import datetime, timezone

    ledger_info.create(conn, checkfirst=True)
    if conn.execute(sa.select(sa.func.count()).select_from(ledger_info)).scalar_one() == 0:
        conn.execute(ledger_info.insert().values(ledger_id=str(uuid.uuid4()), created_at=datetime.now(timezone.utc)))


def _v6(conn: sa.Connection) -> None:
    """Summaries of history past its retention, and the open batches found without walking it
    (issue 43: a year unattended, bounded history)."""
    history.create(conn, checkfirst=True)
    history_batches.create(conn, checkfirst=True)
    for name in ("ix_ob_batches_planned", "ix_ob_batches_superseded", "ix_ob_batches_unpublished",
                 "ix_ob_batches_superseded_by"):
        next(i for i in batches.indexes if i.name == name).create(conn, checkfirst=True)


MIGRATIONS = [_v1, _v2, _v3, _v4, _v5, _v6]
LATEST = len(MIGRATIONS)
