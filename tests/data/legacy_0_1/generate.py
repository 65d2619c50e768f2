"""Writes this folder's table and ledger with offsetbatch 0.1 (commit cb7f77b, before issue 40), so
tests/unit/commit/test_legacy_table.py proves that today's code reads what 0.1 wrote. Run it once,
with 0.1's code first on the path (a git worktree of that commit):

    git worktree add /tmp/ob-0.1 cb7f77b
    PYTHONPATH=/tmp/ob-0.1/include .venv/bin/python tests/data/legacy_0_1/generate.py

It writes to ROOT (a fixed path: the ledger records the table's path, and a table that moved is
refused) and packs ROOT into legacy.tar.gz here. No Kafka, no Spark: the Parquet an attempt stages
is written with pyarrow, as the job would, and the commit is the library's own.
"""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path("/tmp/offsetbatch-legacy-0.1")
HERE = Path(__file__).parent


def main() -> None:
    from offsetbatch.commit.protocol import commit_batch
    from offsetbatch.config import load_config
    from offsetbatch.jobspec import JobSpec, Manifest, RangeReport
    from offsetbatch.ledger import Ledger
    from offsetbatch.model import OffsetRange, TopicPartition
    from offsetbatch.pipeline import Pipeline
    from offsetbatch.source.connection import from_settings

    shutil.rmtree(ROOT, ignore_errors=True)
    ROOT.mkdir(parents=True)
    config = ROOT / "legacy.yaml"
    config.write_text(f"name: legacy\nkafka: {{topics: [events]}}\nvalue: {{format: json, schema: 'id STRING, n INT', "
                      f"required: [id]}}\nsink: {{path: {ROOT}/table}}\nledger: {{url: 'sqlite:///{ROOT}/ledger.db'}}\n")
    pipeline = Pipeline(load_config(config))
    sink, tp = pipeline.sink, TopicPartition("events", 0)
    client = from_settings("kafka_default", {"bootstrap.servers": "127.0.0.1:9"})
    with Ledger.for_config(pipeline.cfg, create=True) as ledger:
        with ledger.lock("legacy") as conn:
            ledger.start_partitions(conn, "legacy", {tp: 0}, "earliest")
        for start, until, publish in ((0, 10, True), (10, 20, True), (20, 25, False)):
            with ledger.lock("legacy") as conn:
                batch = ledger.insert_batch(conn, "legacy", "incremental", [OffsetRange("events", 0, start, until, start)],
                                            dag_id="offsetbatch_legacy", run_id=f"run_{start}", interval=(None, None),
                                            output_path=sink.settings.path)
            JobSpec.for_batch(pipeline.cfg, client, batch).save(sink.staging.spec(batch.batch_id))
            attempt = f"1-legacy{batch.batch_id}"
            data = Path(sink.staging.staging_data(batch.batch_id, attempt))
            data.mkdir(parents=True)
            rows = pa.table({"kafka_topic": ["events"] * (until - start), "kafka_partition": [0] * (until - start),
                             "kafka_offset": list(range(start, until)), "id": [f"e{o}" for o in range(start, until)],
                             "n": list(range(start, until))})
            pq.write_table(rows, data / "part-00000.parquet")
            rejected = Path(sink.staging.staging_rejected(batch.batch_id, attempt))
            rejected.mkdir(parents=True)
            pq.write_table(pa.table({"kafka_offset": pa.array([], pa.int64())}), rejected / "part-00000.parquet")
            Manifest("legacy", batch.batch_id, [RangeReport("events", 0, start, until, until - start, 0, start, until - 1)],
                     until - start, until - start, 0, 100 * (until - start), [str(data / "part-00000.parquet")],
                     [str(rejected / "part-00000.parquet")], 1.0, "4.3.0", attempt=attempt
                     ).save(sink.staging.staging_manifest(batch.batch_id, attempt))
            if publish:
                commit_batch(pipeline, ledger, batch.batch_id, attempt)
    with tarfile.open(HERE / "legacy.tar.gz", "w:gz") as tar:
        tar.add(ROOT, arcname=ROOT.name)
    print(f"wrote {HERE / 'legacy.tar.gz'} from {ROOT}")


if __name__ == "__main__":
    main()
