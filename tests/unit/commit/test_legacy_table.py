"""A table, ledger, job spec and staged attempt written by offsetbatch 0.1 (tests/data/legacy_0_1:
two committed batches and a third staged under 0.1's ``_offsetbatch/staging/`` when the upgrade
came) read and commit with today's code: the YAML loads unchanged, the ledger owns the table, pyarrow
reads every record once, and the in-flight batch is refused with what to do, then published once
re-staged. Logic only: no Kafka or Spark is involved in reading what is on disk."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pyarrow.dataset as ds
import pytest
import sqlalchemy as sa

from offsetbatch.commit import ownership
from offsetbatch.commit.protocol import commit_batch
from offsetbatch.errors import ManifestError
from offsetbatch.jobspec import JobSpec, Manifest
from offsetbatch.model import TopicPartition
from offsetbatch.pipeline import Pipeline

FIXTURE = Path(__file__).parents[2] / "data" / "legacy_0_1" / "legacy.tar.gz"
ROOT = Path("/tmp/offsetbatch-legacy-0.1")  # where 0.1 wrote it: the ledger records the table's path
TP = TopicPartition("events", 0)


@pytest.fixture
def legacy() -> Pipeline:
    shutil.rmtree(ROOT, ignore_errors=True)
    with tarfile.open(FIXTURE) as tar:
        # the "data" filter where this Python has it (3.11.4+, and backports); Debian 12's 3.11.2 has not
        tar.extractall(ROOT.parent, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    yield Pipeline.load(ROOT / "legacy.yaml")
    shutil.rmtree(ROOT, ignore_errors=True)


def _offsets() -> list[int]:
    """The table as a reader that is not ours sees it (pyarrow, hive partitions)."""
    table = ds.dataset(ROOT / "table", format="parquet", partitioning="hive").to_table()
    return sorted(table.column("kafka_offset").to_pylist())


def _ledger_rows(pipeline: Pipeline) -> list:
    with pipeline.ledger() as ledger, ledger.reading() as conn:
        return [tuple(r) for t in ("ob_batches", "ob_ranges", "ob_frontier", "ob_events")
                for r in conn.execute(sa.text(f"SELECT * FROM {t} ORDER BY 1, 2"))]


def test_a_table_and_ledger_of_0_1_read_as_before(legacy):
    with legacy.ledger() as ledger:
        ownership.check(legacy.name, ledger, legacy.sink)  # the ledger still owns the table
        with ledger.reading() as conn:
            assert ledger.frontier(conn, legacy.name) == {TP: 20}
        assert ledger.committed_ids(legacy.name) == {1, 2}
    assert {i: m.attempt for i, m in legacy.sink.published_manifests().items()} == {1: "1-legacy1", 2: "1-legacy2"}
    assert _offsets() == list(range(20))
    spec = JobSpec.load(legacy.sink.staging.spec(3))
    assert (spec.role, spec.value_format, spec.schema_ddl, spec.offset_ranges[0].until_offset) == \
        ("value", "json", "id STRING, n INT", 25)


def test_a_batch_staged_by_0_1_is_refused_then_published_once_staged_again(legacy):
    before = _ledger_rows(legacy)
    with legacy.ledger() as ledger, pytest.raises(ManifestError) as refused:
        commit_batch(legacy, ledger, 3, "1-legacy3")
    assert ("pipeline legacy batch 3: attempt 1-legacy3 was staged by an earlier offsetbatch, under "
            f"{ROOT}/table/_offsetbatch/staging/batch_id=3/attempt=1-legacy3/_manifest.json") in str(refused.value)
    assert "Nothing was committed. Clear this run's spark_job task" in str(refused.value)
    assert _ledger_rows(legacy) == before and _offsets() == list(range(20))

    # the cleared spark_job task stages it again, under today's layout
    staging = legacy.sink.staging
    old = Path(staging.legacy_attempts(3)) / "attempt=1-legacy3"
    shutil.copytree(old, staging.attempt(3, "2-new"))
    manifest = Manifest.load(staging.staging_manifest(3, "2-new"))
    manifest.attempt = "2-new"
    manifest.save(staging.staging_manifest(3, "2-new"))
    with legacy.ledger() as ledger:
        commit_batch(legacy, ledger, 3, "2-new")
        with ledger.reading() as conn:
            assert ledger.frontier(conn, legacy.name) == {TP: 25}
    assert _offsets() == list(range(25)), "every record once, batch 3 included"
    assert not Path(staging.legacy_attempts(3)).exists() and not Path(staging.attempts(3)).exists()
