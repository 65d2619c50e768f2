"""The Spark step of a batch: read exactly the planned offset ranges, parse, transform, write.

    spark-submit --jars <connector jars> jobs/offsetbatch_job.py --spec <table>/_offsetbatch/plans/batch_id=N.json

``jobs/offsetbatch_job.py`` (what spark-submit runs) calls ``main``; the spark_job task on a Spark
Connect server calls ``run_batches`` itself. The records are read with Spark's Kafka source
(``job.read``), values parsed with the pipeline's value format (``offsetbatch.formats``), malformed
records routed to the rejected output, the transform applied (``job.transform``) and both handed to
the sink's job half (``offsetbatch.sinks``), which stages them in this attempt's own folder. One
pass: Kafka is read and each value parsed once, by the data write; the per-range statistics, the
offset check and the (rare) rejected records are observed on the way (``job.stats``), nothing is
cached and nothing written is read back. The manifest, written last, says per range what was read;
the commit task checks it. This job never touches the ledger.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time

from pyspark import SparkConf
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from offsetbatch import faults, job_secrets, storage
from offsetbatch.formats import ERROR, FORMATS, META, SKIP
from offsetbatch.job import codegen
from offsetbatch.job import stats as job_stats
from offsetbatch.job.read import KAFKA_TIMEOUT_MS, in_few_tasks, read_ranges, with_metadata
from offsetbatch.job.transform import analyzed_transform, parse_records
from offsetbatch.jobspec import JobSpec, Manifest
from offsetbatch.sinks import settings_for, sink_for
from offsetbatch.sinks.base import RejectedRows, Sink, StagedOutput
from offsetbatch.sinks.staging import StagingLayout
from offsetbatch.spark_session import is_remote_session, set_settings

log = logging.getLogger("offsetbatch.job")

MAX_RESULT_SIZE = "256m"
# Spark SQL settings the job ships; a pipeline's own spark.conf overrides them. A partitioned write
# keeps up to 16 Parquet writers open per task instead of sorting every row by its partition values
# first (Spark plans no sort then: V1WritesUtils.getSortOrder); a task that meets more values sorts
# the rest, as Spark always did. Parquet's memory manager shrinks row groups if the open writers
# would not fit the heap.
SQL_DEFAULTS = {"spark.sql.maxConcurrentOutputFileWriters": "16"}
# On S3A, Spark's default commit renames every task's files (a copy of each object on S3): the
# "magic" committer uploads each file once, to its final name, and completes the uploads at job
# commit (spark-hadoop-cloud's binding; the jars come with the S3A ones, dag.spark_jars).
MAGIC_COMMITTER = {
    "fs.s3a.committer.name": "magic",
    "fs.s3a.committer.magic.enabled": "true",
    "spark.sql.sources.commitProtocolClass": "org.apache.spark.internal.io.cloud.PathOutputCommitProtocol",
    "spark.sql.parquet.output.committer.class": "org.apache.spark.internal.io.cloud.BindingParquetOutputCommitter",
}


def _kill_when_writing(staging_data: str, driver_is_parent: bool) -> None:
    """Fault point job.kill_during_write: once the first data file is being written, SIGKILL the
    driver's JVM (spark-submit's SparkSubmit, this process's parent; not on Spark Connect, where
    the driver is the server) and this process, as a lost node or the OOM killer would: no
    shutdown hook gets to clean up the partial files."""
    def watch() -> None:
        while True:
            # a task's file under the classic committer's _temporary/, or the magic committer's marker
            if any(("/_temporary/" in f or "/__magic" in f) and "/part-" in f
                   for f in storage.files(staging_data, suffix="")):
                log.error("fault injection: killing the Spark %s mid-write (job.kill_during_write)",
                          "driver" if driver_is_parent else "client (the spark_job task)")
                for stream in (sys.stdout, sys.stderr):
                    stream.flush()
                if driver_is_parent:
                    time.sleep(0.5)  # the JVM relays this process's stderr: let the line out first
                    os.kill(os.getppid(), signal.SIGKILL)
                # On Spark Connect this process is the task itself, which could finish the (small)
                # write and the run within a pause: kill it at once, the line already flushed.
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(0.01)
    threading.Thread(target=watch, daemon=True).start()


def _write_batch(spark: SparkSession, spec: JobSpec, sink: Sink, attempt: str, secrets: dict[str, str] | None,
                 collect_rejected: bool) -> tuple[StagedOutput, dict]:
    """One read of the ranges, parsed once: the data write is the only action over Kafka; the
    batch's statistics and (``collect_rejected``) its rejected records are observed on the way.
    Without ``collect_rejected`` the rejected records are read and parsed a second time. The plan
    is analyzed (schema, transform) before the write starts, so a config error reads nothing."""
    value_format = FORMATS[spec.value_format]

    def parsed_records() -> DataFrame:
        return parse_records(with_metadata(in_few_tasks(read_ranges(spark, spec, secrets), spec), spec), spec)

    observed, observation = job_stats.observe_batch(parsed_records(), spec, collect_rejected, value_format.keeps_value,
                                                    value_format.skips)
    good = observed.where(F.col(ERROR).isNull())
    if value_format.skips:  # a record the format skipped (a Debezium heartbeat) is neither a row nor rejected
        good = good.where(F.col(SKIP).isNull()).drop(SKIP)
    good = good.drop(ERROR, *job_stats.WORK_COLUMNS, *([] if value_format.keeps_value else ["value"]))
    out = analyzed_transform(spark, good, spec)
    log.info("pipeline %s batch %d attempt %s: reading %d range(s), %d records%s", spec.pipeline, spec.batch_id,
             attempt, len(spec.ranges), sum(r.size for r in spec.offset_ranges),
             f" (replaces the output of batch {spec.output_id})" if spec.output_id != spec.batch_id else "")
    if is_remote_session(spark):
        out = job_stats.linked(out, observation)

    def rejected_frame() -> DataFrame:  # called by the sink after the data write
        if collect_rejected:
            return job_stats.rejected_frame(spark, job_stats.observed(observation, spec))
        return parsed_records().where(F.col(ERROR).isNotNull()).select(
            *META[:5], F.col("value").alias("raw_value"), F.col(ERROR).alias("error"))
        # batch_id comes from where the sink publishes it (files: <table>/_rejected/batch_id=N)

    rejected = RejectedRows(rejected_frame, lambda: job_stats.observed(observation, spec)["rejected"] == 0,
                            job_stats.rejected_schema())
    if faults.active("job.kill_during_write"):
        _kill_when_writing(sink.staging.staging_data(spec.batch_id, attempt), not is_remote_session(spark))
    staged = sink.stage(spark, out, rejected, spec.batch_id, attempt, output_id=spec.output_id)
    return staged, job_stats.observed(observation, spec)


def _too_many_rejected(exc: Exception) -> bool:
    """Spark refused the tasks' results (``spark.driver.maxResultSize``): the collected rejected
    records of a batch that is mostly bad do not fit the driver."""
    return "maxResultSize" in str(exc)


def run(spark: SparkSession, spec: JobSpec, attempt: str, secrets: dict[str, str] | None = None) -> Manifest:
    t0 = time.monotonic()
    sink = sink_for(spec.pipeline, spec.sink)
    manifest_uri = sink.staging.staging_manifest(spec.batch_id, attempt)
    # An attempt id is reused only by a rerun of this same attempt: never trust its old manifest.
    storage.remove(manifest_uri)
    records = sum(r.size for r in spec.offset_ranges)
    with codegen.for_batch(spark, records) as interpreted:
        if interpreted:
            log.info("pipeline %s batch %d: %d records, evaluated without generated code (job.codegen: a batch "
                     "of up to %d records)", spec.pipeline, spec.batch_id, records, codegen.SMALL_BATCH_RECORDS)
        try:
            staged, values = _write_batch(spark, spec, sink, attempt, secrets, collect_rejected=True)
        except Exception as exc:
            if not _too_many_rejected(exc):
                raise
            log.warning("pipeline %s batch %d: the rejected records are too many to collect in one pass "
                        "(spark.driver.maxResultSize); writing the batch again, the rejected records from a "
                        "second read of its ranges", spec.pipeline, spec.batch_id)
            staged, values = _write_batch(spark, spec, sink, attempt, secrets, collect_rejected=False)
    reports = job_stats.reports(spec, values)

    manifest = Manifest(
        pipeline=spec.pipeline, output_id=spec.output_id, ranges=reports,
        rows_in=values["rows"], rows_out=staged.rows_out, rows_rejected=values["rejected"],
        bytes_in=values["bytes"] or 0, data_files=staged.data_files, rejected_files=staged.rejected_files,
        job_seconds=round(time.monotonic() - t0, 3), spark_version=spark.version, attempt=attempt,
        first_record_us=values.get("first_record_us"), last_record_us=values.get("last_record_us"),
        sink_metrics=staged.metrics, rows_skipped=values.get("skipped") or 0,
    )
    manifest.save(manifest_uri)
    skipped = f", skipped {manifest.rows_skipped} (not changes: heartbeats, tombstones…)" if manifest.rows_skipped else ""
    log.info("pipeline %s batch %d: read %d, wrote %d, rejected %d%s in %.1fs", spec.pipeline, spec.batch_id,
             manifest.rows_in, manifest.rows_out, manifest.rows_rejected, skipped, manifest.job_seconds)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="offsetbatch Spark step")
    parser.add_argument("--spec", required=True, action="append",
                        help="URI of a batch's job spec (JSON); repeat for the batches of a backfill run")
    parser.add_argument("--attempt", required=True, help="this attempt's id: its own staging folder")
    parser.add_argument(job_secrets.ARG, job_secrets.OLD_ARG, dest="secrets", metavar="FILE",
                        help="JSON file (mode 0600) with the secrets of the pipeline's connections (the Kafka "
                             "connection's kafka.* options, an object store's fs.s3a.* keys); the spark_job task "
                             "writes it and removes it after the run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr)
    secrets = job_secrets.read(args.secrets) if args.secrets else {}
    if args.secrets:  # read once; nothing needs it on disk any longer (the task removes its folder too)
        os.unlink(args.secrets)
    bind_object_store(secrets, args.spec)  # before the specs are read: they may be on it
    specs = [JobSpec.load(uri) for uri in args.spec]
    ids = "-".join(str(s.batch_id) for s in specs)
    builder = SparkSession.builder.appName(f"offsetbatch-{specs[0].pipeline}-batch-{ids}-{args.attempt}")
    # The observed rejected records come back with the tasks' results: a mostly-bad batch hits
    # maxResultSize (and is written in two reads, see run) long before it could exhaust the driver.
    for key, value in {"spark.driver.maxResultSize": MAX_RESULT_SIZE, **SQL_DEFAULTS}.items():
        if not SparkConf().contains(key):  # what spark-submit got (the pipeline's spark.conf) wins
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    try:
        run_batches(spark, specs, args.attempt, secrets)
    finally:
        spark.stop()
    return 0


def run_batches(spark: SparkSession, specs: list[JobSpec], attempt: str, secrets: dict[str, str]) -> list[Manifest]:
    """The batches of one submission in one Spark session, one after another: what ``main`` runs
    after ``spark-submit``, and what the spark_job task runs itself on a Spark Connect server."""
    # Spark redacts data source options whose name or value matches this in plans, the UI and
    # event logs; its default ("url") misses the SASL login and an inline client key.
    set_settings(spark, {"spark.sql.redaction.options.regex": "(?i)url|jaas|password|keystore\\.key",
                         **session_settings(secrets)})
    bind_object_store(secrets, [settings_for(spec.sink).root for spec in specs])
    manifests = []
    for spec in specs:
        try:
            manifests.append(run(spark, spec, attempt, secrets))
        except Exception as exc:
            _leave_error(spec, attempt, exc)
            raise
    return manifests


def session_settings(secrets: dict[str, str]) -> dict[str, str]:
    """The job session's object-store settings: its ``fs.*`` settings, which S3A reads from the
    session (Spark redacts the secret ones), and the magic committer. On a Spark Connect server
    shared by pipelines, Hadoop's one S3A client per bucket per JVM is made with the settings of
    the first session that opened the bucket (docs/architecture.md, *Pipelines sharing a Spark
    Connect server*): ``config.installed`` refuses pipelines that would reach one bucket with two
    storage connections there."""
    store = object_store_options(secrets)
    return {**store, **MAGIC_COMMITTER} if store else {}


def object_store_options(secrets: dict[str, str]) -> dict[str, str]:
    """The ``fs.*`` (Hadoop S3A) settings among the job's secrets: the sink's object store."""
    return {k: v for k, v in secrets.items() if k.startswith("fs.")}


def bind_object_store(secrets: dict[str, str], locations: list[str]) -> None:
    """This process's own file operations (specs, manifests) on the object store, with the same settings."""
    options = object_store_options(secrets)
    if not options:
        return
    from offsetbatch.storage.s3 import S3Settings

    filesystem = S3Settings.from_hadoop_options(options).filesystem()
    for location in locations:
        if storage.is_s3(location):
            storage.register_s3(storage.bucket_of(location), filesystem)


def _leave_error(spec: JobSpec, attempt: str, exc: Exception) -> None:
    """The failure's one-line cause, where the spark_job task's failure line reads it
    (``tasks.spark_failure``): Spark's own exceptions are long and their first line says little."""
    text = " ".join(str(exc).split())
    if "TimeoutException" in text or "Timeout of" in text or "timed out" in text.lower():
        text = (f"Kafka at {spec.bootstrap} did not answer within {KAFKA_TIMEOUT_MS // 1000} s (is the broker up and "
                f"reachable?): {text}")
    try:
        storage.write_json(StagingLayout(settings_for(spec.sink).root).job_error(spec.batch_id, attempt),
                           {"error": f"{type(exc).__name__}: {text[:1200]}",
                            # the task fails at once, without its retries, when one of these is an error no
                            # retry fixes (dag.retry_policy: a transform that does not analyze, a writer schema
                            # the reader cannot read)
                            "types": [c.__name__ for c in type(exc).__mro__ if c.__module__.startswith("offsetbatch")]})
    except Exception:  # noqa: BLE001 - the original error matters more than its note
        log.exception("pipeline %s batch %d: could not record the job's error", spec.pipeline, spec.batch_id)
