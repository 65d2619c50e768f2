"""The commit's two publication strategies, picked by the sink's trait alone (``commit.publication``),
on a real SQLite ledger: a sink that publishes after the ledger transaction sees the batch already
committed and is rolled forward after a crash; a sink that publishes inside it shares the
transaction, so its failure leaves the batch planned and the frontier where it was. The sinks here
are stand-ins that record calls (what is under test is the protocol, not a destination)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from offsetbatch import faults
from offsetbatch.commit.protocol import commit_batch
from offsetbatch.commit.publication import AfterLedgerCommit, InLedgerTransaction, publication_for, publish_pending
from offsetbatch.config import load_config
from offsetbatch.errors import SinkError
from offsetbatch.jobspec import Manifest, RangeReport
from offsetbatch.ledger import Ledger
from offsetbatch.model import OffsetRange, TopicPartition
from offsetbatch.pipeline import Pipeline
from offsetbatch.sinks import SINKS, PublishesAfterLedgerCommit, PublishesInLedgerTransaction, Sink

P0 = TopicPartition("t", 0)
CALLS: list[tuple] = []


class _Recording(Sink):
    target = "stand-in"

    def asset_uri(self) -> str:
        return "standin://x"

    def published_ids(self) -> list[int]:
        return []

    def read_committed(self, spark): ...

    def read_rejected(self, spark): ...


class AfterSink(PublishesAfterLedgerCommit, _Recording):
    type = "after"

    def publish(self, batch_id, output_id, attempt, superseded=(), kind=""):
        reader = sqlite3.connect(f"file:{self.ledger_file}?mode=ro", uri=True, timeout=1)  # any other reader, now
        try:
            [(status,)] = reader.execute("SELECT status FROM ob_batches WHERE pipeline = ? AND batch_id = ?",
                                         (self.pipeline_name, batch_id)).fetchall()
        finally:
            reader.close()
        CALLS.append(("publish", batch_id, output_id, attempt, status))

    def retire(self, output_id):
        CALLS.append(("retire", output_id))

    def is_published(self, output_id, attempt):
        return False


class InTxSink(PublishesInLedgerTransaction, _Recording):
    type = "intx"
    fail = False

    def publish_in_transaction(self, conn, batch_id, output_id, attempt, ledger_id):
        CALLS.append(("publish_in_transaction", batch_id, output_id, attempt, conn.in_transaction()))
        if InTxSink.fail:
            raise SinkError("the load failed")

    def retire_in_transaction(self, conn, output_id):
        CALLS.append(("retire_in_transaction", output_id))


class NoTraitSink(_Recording):
    type = "notrait"


@pytest.fixture
def setup(tmp_path, monkeypatch):
    CALLS.clear()
    InTxSink.fail = False
    for kind in (AfterSink, InTxSink, NoTraitSink):
        monkeypatch.setitem(SINKS, kind.type, kind)
    url = f"sqlite:///{tmp_path}/ledger.db"

    def make(kind: str) -> tuple[Pipeline, Ledger, int]:
        path = tmp_path / f"{kind}.yaml"
        path.write_text(f"name: p_{kind}\nkafka: {{topics: [t]}}\nledger: {{url: '{url}'}}\n"
                        f"sink: {{type: {kind}, path: {tmp_path}/{kind}}}\n")
        pipeline = Pipeline(load_config(path))
        pipeline.sink.ledger_file = tmp_path / "ledger.db"
        ledger = Ledger(url, create=True)
        with ledger.lock(pipeline.name) as conn:
            ledger.start_partitions(conn, pipeline.name, {P0: 0}, "earliest")
            batch = ledger.insert_batch(conn, pipeline.name, "incremental", [OffsetRange("t", 0, 0, 10, 0)],
                                        dag_id="d", run_id="r1", interval=(None, None), output_path="/x")
        Manifest(pipeline=pipeline.name, output_id=batch.batch_id, attempt="a1",
                 ranges=[RangeReport("t", 0, 0, 10, rows=10, rejected=0)], rows_in=10, rows_out=10, rows_rejected=0,
                 bytes_in=100, data_files=[], rejected_files=[], job_seconds=1.0, spark_version="test") \
            .save(pipeline.sink.staging.staging_manifest(batch.batch_id, "a1"))
        return pipeline, ledger, batch.batch_id

    return make


def test_the_trait_picks_the_strategy(setup):
    assert isinstance(publication_for(*setup("after")[:2]), AfterLedgerCommit)
    assert isinstance(publication_for(*setup("intx")[:2]), InLedgerTransaction)
    with pytest.raises(TypeError, match="sink type 'notrait' .* has no publication trait"):
        publication_for(*setup("notrait")[:2])


def test_after_commit_publishes_a_batch_readers_already_see_committed(setup):
    pipeline, ledger, batch_id = setup("after")
    assert commit_batch(pipeline, ledger, batch_id, "a1").outcome == "committed"
    assert CALLS == [("publish", batch_id, batch_id, "a1", "committed")]
    assert ledger.frontier_now(pipeline.name) == {P0: 10}
    assert publish_pending(pipeline, ledger) == []  # marked published by the same step


def test_after_commit_is_rolled_forward_after_a_crash_between_the_two(setup, monkeypatch):
    pipeline, ledger, batch_id = setup("after")
    monkeypatch.setenv("OFFSETBATCH_FAULTS", "commit.after_transaction")
    with pytest.raises(faults.InjectedFault):
        commit_batch(pipeline, ledger, batch_id, "a1")
    assert CALLS == [] and ledger.get_batch(pipeline.name, batch_id).status == "committed"
    monkeypatch.delenv("OFFSETBATCH_FAULTS")
    assert publish_pending(pipeline, ledger) == [batch_id]  # what the next plan or commit does first
    assert CALLS == [("publish", batch_id, batch_id, "a1", "committed")]
    assert publish_pending(pipeline, ledger) == []  # marked published: never twice


def test_in_transaction_publishes_inside_the_commit_and_only_cleans_up_after(setup):
    pipeline, ledger, batch_id = setup("intx")
    assert commit_batch(pipeline, ledger, batch_id, "a1").outcome == "committed"
    assert CALLS == [("publish_in_transaction", batch_id, batch_id, "a1", True)]
    assert publish_pending(pipeline, ledger) == []  # published in the same transaction: nothing to roll forward
    assert not Path(pipeline.sink.staging.attempts(batch_id)).exists()  # its staging removed after the COMMIT


def test_a_failed_in_transaction_publish_changes_nothing(setup):
    pipeline, ledger, batch_id = setup("intx")
    InTxSink.fail = True
    with pytest.raises(SinkError, match="the load failed"):
        commit_batch(pipeline, ledger, batch_id, "a1")
    assert ledger.get_batch(pipeline.name, batch_id).status == "planned"
    assert ledger.frontier_now(pipeline.name) == {P0: 0}
