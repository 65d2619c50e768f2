"""A SQL transform reads the records and nothing else, whatever its spelling (issue 58, item 1).

The job's own check, with the config's text check bypassed (the job specs are built here, not loaded
from a config), in job runs over a real topic: classic PySpark in-process (``job.run.run``, what
spark-submit runs) and a Spark Connect client of the suite's server (``job.run.run_batches``, what the
spark_job task runs), in a child process. Each spelling that once read a host's file, another
session's view or a catalog table is refused before Kafka is read, naming what it reads, and no
output is written; the pipeline's ``spark.conf`` turning ``spark.sql.runSQLOnFiles`` back on changes
nothing. Ordinary SQL over the records (filters, self-joins, windows, VALUES, subqueries) still runs.
The plan check alone (without ``runSQLOnFiles`` off) refuses the file relations too. A plan that does
not analyze fails before Kafka is read naming its cause, the value schema or the transform, in both:
on Spark Connect the job analyzes the whole plan once and only then asks which part failed."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from offsetbatch.errors import TransformAnalysisError
from offsetbatch.job import reads
from offsetbatch.job import run as job
from offsetbatch.jobspec import JobSpec

pytestmark = pytest.mark.integration
TOPIC = "transform-reads"
SECRET = "host-secret-58"
VIEW, TABLE = f"leak_{os.getpid()}", f"leak_tbl_{os.getpid()}"
# Each spelling: its SQL (``{name}``: the module's sources) and what the refusal must name.
REFUSED = {
    "text": ("text.`{host}`", "`text`.`{host}`"),
    "class_name": ("`org.apache.spark.sql.execution.datasources.text.TextFileFormat`.`{host}`",
                   "`org.apache.spark.sql.execution.datasources.text.TextFileFormat`.`{host}`"),
    "image": ("image.`{images}`", "`image`.`{images}`"),
    "libsvm": ("libsvm.`{libsvm}`", "`libsvm`.`{libsvm}`"),
    "identifier_image": ("IDENTIFIER('image.`{images}`')", "`image`.`{images}`"),
    "binary_file": ("binaryFile.`{host}`", "`binaryFile`.`{host}`"),
    "parquet": ("parquet.`{parquet}`", "`parquet`.`{parquet}`"),
    "json": ("json.`{json}`", "`json`.`{json}`"),
    "global_temp_view": (f"global_temp.{VIEW}", f"'View (`global_temp`.`{VIEW}`"),
    "catalog_table": (f"default.{TABLE}", f"'Relation spark_catalog.default.{TABLE}["),
}
SCRIPT = ("SELECT TRANSFORM(a) USING 'cat {host}' AS (leak) FROM records", "'ScriptTransformation cat {host}")
PASSES = {  # SQL over the records only -> the rows it writes of the topic's 6 records (n = 0..5)
    "self_join_window": ("SELECT r.a, r.n, s.kafka_offset AS other, row_number() OVER (PARTITION BY r.a ORDER BY r.n) "
                         "AS rn, split(r.a, '\\n') AS parts FROM records r JOIN records s ON r.n = s.n "
                         "WHERE r.n % 2 = 0", 3),
    "values_subqueries": ("WITH big AS (SELECT * FROM records WHERE n > (SELECT min(n) FROM records)) "
                          "SELECT big.a, big.n, v.label FROM big JOIN (VALUES (1, 'one'), (3, 'three')) AS v(k, label) "
                          "ON big.n = v.k WHERE big.n IN (SELECT n FROM records) "
                          "UNION ALL SELECT 'x', CAST(id AS INT), 'range' FROM range(1)", 3),
}

# Plans that do not analyze -> (the spec's fields, what the error must say). The value schema passed
# no config check here (the specs are built here): Spark's DDL parser is the first to read it.
FAILS = {
    "bad_value_schema": ({"schema_ddl": "a STRING, n INTEGR"},
                         "value.schema 'a STRING, n INTEGR' is not a Spark schema"),
    "bad_value_schema_no_transform": ({"schema_ddl": "a STRING, n INTEGR", "transform_sql": None},
                                      "value.schema 'a STRING, n INTEGR' is not a Spark schema"),
    "unknown_column": ({"transform_sql": "SELECT nope FROM records"},
                       "the transform.sql 'SELECT nope FROM records' fails analysis against the records' columns"),
    "unknown_column_trusted": ({"transform_sql": "SELECT nope FROM records", "transform_system_access": True},
                               "the transform.sql 'SELECT nope FROM records' fails analysis against the records' "
                               "columns"),
}


def _refused_sql(case: str) -> tuple[str, str]:
    if case == "transform_using":
        return SCRIPT
    table, named = REFUSED[case]
    return f"SELECT r.a, r.n, x.* FROM records r CROSS JOIN {table} x", named


CASES = [*REFUSED, "transform_using"]


def _png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    pixels = zlib.compress(b"".join(b"\x00" + b"\xff\x00\x00" * 2 for _ in range(2)))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", pixels) + chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, str]:
    """Files of every kind a spelling names, each holding ``SECRET`` where it can."""
    root = tmp_path_factory.mktemp("host")
    (root / "hostname").write_text(f"{SECRET}\n")
    (root / "images").mkdir()
    (root / "images" / "a.png").write_bytes(_png())
    (root / "x.libsvm").write_text("1 1:0.5 3:1.0\n")
    (root / "x.json").write_text(json.dumps({"secret": SECRET}) + "\n")
    import pyarrow as pa
    import pyarrow.parquet as pq
    (root / "parquet").mkdir()
    pq.write_table(pa.table({"secret": [SECRET]}), root / "parquet" / "part-0.parquet")
    (root / "table").mkdir()
    return {"host": str(root / "hostname"), "images": str(root / "images"), "libsvm": str(root / "x.libsvm"),
            "json": str(root / "x.json"), "parquet": str(root / "parquet"), "table_location": str(root / "table")}


@pytest.fixture(scope="module")
def topic(kafka_broker) -> str:
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    admin.create_topics([NewTopic(TOPIC, 1, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all")
    for n in range(6):
        producer.send(TOPIC, partition=0, value=json.dumps({"a": "k", "n": n}).encode())
    producer.flush()
    producer.close()
    return TOPIC


def _spec(bootstrap: str, table: str, sql: str, trusted: bool = False) -> dict:
    return {"pipeline": "reads", "batch_id": 1, "output_id": 1, "bootstrap": bootstrap,
            "ranges": [{"topic": TOPIC, "partition": 0, "from_offset": 0, "until_offset": 6, "frontier_before": 0}],
            "sink": {"type": "files", "path": table}, "value_format": "json", "schema_ddl": "a STRING, n INT",
            "transform_sql": sql, "transform_system_access": trusted}


def _written(table: str) -> list[str]:
    """Data files and manifests under a sink's folder (a refused job leaves only its error note)."""
    return sorted(str(p) for p in Path(table).rglob("*") if p.is_file() and (p.name.startswith("part-")
                                                                              or p.name == "_manifest.json"))


# -- classic PySpark, in-process ------------------------------------------------------------------

@pytest.fixture(scope="module")
def classic(spark, sources):
    """Another session's global_temp view and a catalog table, in the shared in-process Spark."""
    other = spark.newSession()
    other.createDataFrame([(SECRET,)], "secret STRING").createOrReplaceGlobalTempView(VIEW)
    other.sql(f"CREATE TABLE default.{TABLE} (secret STRING) USING parquet LOCATION '{sources['table_location']}'")
    other.sql(f"INSERT INTO default.{TABLE} VALUES ('{SECRET}')")
    yield spark
    other.sql(f"DROP TABLE IF EXISTS default.{TABLE}")
    other.catalog.dropGlobalTempView(VIEW)


@pytest.fixture
def session_conf(classic):
    """The pipeline's spark.conf turns path tables back on; the job's settings are unset afterwards
    (the in-process Spark is shared by the suite)."""
    classic.conf.set("spark.sql.runSQLOnFiles", "true")
    yield classic
    for key in ("spark.sql.runSQLOnFiles", "spark.sql.variable.substitute"):
        classic.conf.unset(key)


@pytest.mark.parametrize("case", CASES)
def test_classic_job_refuses_every_read_beyond_the_records(case, session_conf, kafka_broker, topic, sources,
                                                           tmp_path):
    sql, named = (s.format(**sources) for s in _refused_sql(case))
    table = str(tmp_path / "table")
    with pytest.raises(TransformAnalysisError) as refused:
        job.run(session_conf, JobSpec(**_spec(kafka_broker.bootstrap, table, sql)), "a1")
    assert named in str(refused.value) and "reads only the view 'records'" in str(refused.value), str(refused.value)
    assert "pipeline reads batch 1: the transform.sql" in str(refused.value)
    assert _written(table) == []


def test_classic_the_issues_spelling_reads_the_host_file_where_the_sql_is_trusted(session_conf, kafka_broker, topic,
                                                                                  sources, tmp_path):
    """The control: with transform.allow_system_access the issue's SQL runs and copies the file into
    every row, so its refusal above is the check's, not a wrong path's. (The other spellings' refusals
    name the view, table or program Spark resolved; the path spellings resolve to a file relation in
    test_the_plan_check_alone_refuses_each_file_relation.)"""
    import pyarrow.parquet as pq

    sql = _refused_sql("class_name")[0].format(**sources)
    manifest = job.run(session_conf, JobSpec(**_spec(kafka_broker.bootstrap, str(tmp_path / "t"), sql, trusted=True)),
                       "a1")
    values = {str(v) for f in manifest.data_files for row in pq.read_table(f).to_pylist() for v in row.values()}
    assert SECRET in values and manifest.rows_out == 6


@pytest.mark.parametrize("case", list(PASSES))
def test_classic_sql_over_the_records_only_still_runs(case, session_conf, kafka_broker, topic, tmp_path):
    sql, rows = PASSES[case]
    manifest = job.run(session_conf, JobSpec(**_spec(kafka_broker.bootstrap, str(tmp_path / "t"), sql)), "a1")
    assert (manifest.rows_in, manifest.rows_out) == (6, rows)


def _failing_spec(bootstrap: str, table: str, case: str) -> dict:
    return {**_spec(bootstrap, table, "SELECT a, n FROM records"), **FAILS[case][0]}


@pytest.mark.parametrize("case", list(FAILS))
def test_classic_a_plan_that_does_not_analyze_names_its_cause(case, session_conf, kafka_broker, topic, tmp_path):
    table = str(tmp_path / "table")
    with pytest.raises(TransformAnalysisError) as failed:
        job.run(session_conf, JobSpec(**_failing_spec(kafka_broker.bootstrap, table, case)), "a1")
    assert FAILS[case][1] in str(failed.value) and "Nothing was read from Kafka" in str(failed.value), str(failed.value)
    assert _written(table) == []


@pytest.mark.parametrize("case", ["text", "class_name", "image", "libsvm", "identifier_image", "binary_file",
                                  "parquet", "json"])
def test_the_plan_check_alone_refuses_each_file_relation(case, session_conf, sources):
    """With ``spark.sql.runSQLOnFiles`` on (as without the job's setting), Spark reads the path as a
    table: the allow-list on the analyzed plan refuses it by itself."""
    records = session_conf.createDataFrame([("k", 1)], "a STRING, n INT")
    records.createOrReplaceTempView("records")
    out = session_conf.sql(_refused_sql(case)[0].format(**sources))
    found = reads.check(session_conf, out)
    assert found is not None and "'Relation [" in found, found


# -- Spark Connect: the job as the spark_job task runs it, in a child process ----------------------

CONNECT_CHILD = """
import json, sys
from pyspark.sql import SparkSession
from offsetbatch.errors import TransformAnalysisError
from offsetbatch.job import run as job
from offsetbatch.jobspec import JobSpec

url, cases, secret, view, table, location = json.loads(sys.argv[1])
other = SparkSession.builder.remote(url).create()  # another pipeline's session on the shared server
other.createDataFrame([(secret,)], "secret STRING").createOrReplaceGlobalTempView(view)
other.sql(f"CREATE TABLE default.{table} (secret STRING) USING parquet LOCATION '{location}'")
other.sql(f"INSERT INTO default.{table} VALUES ('{secret}')")
results = {}
spark = SparkSession.builder.remote(url).create()  # the job's session
try:
    for case, spec in cases.items():
        spark.conf.set("spark.sql.runSQLOnFiles", "true")  # as a pipeline's spark.conf could
        try:
            manifest = job.run_batches(spark, [JobSpec(**spec)], "a1", {})[0]
            results[case] = {"rows_out": manifest.rows_out}
        except TransformAnalysisError as exc:
            results[case] = {"error": str(exc)}
finally:
    spark.stop()
    other.sql(f"DROP TABLE IF EXISTS default.{table}")
    other.catalog.dropGlobalTempView(view)
print("RESULTS " + json.dumps(results))
"""


@pytest.fixture(scope="module")
def connect_runs(spark_connect_server, kafka_broker, topic, sources, tmp_path_factory) -> tuple[dict, dict]:
    """Every case's job run on the Connect server, in one child process: results and sink folders."""
    root = tmp_path_factory.mktemp("connect")
    (root / "table").mkdir()
    tables, specs = {}, {}
    for case in [*CASES, *PASSES]:
        sql = PASSES[case][0] if case in PASSES else _refused_sql(case)[0].format(**sources)
        tables[case] = str(root / case)
        specs[case] = _spec(kafka_broker.bootstrap, tables[case], sql)
    for case in FAILS:
        tables[case] = str(root / case)
        specs[case] = _failing_spec(kafka_broker.bootstrap, tables[case], case)
    args = [spark_connect_server.url, specs, SECRET, VIEW, TABLE, str(root / "table")]
    done = subprocess.run([sys.executable, "-c", CONNECT_CHILD, json.dumps(args)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULTS "))
    return json.loads(line.removeprefix("RESULTS ")), tables


@pytest.mark.parametrize("case", CASES)
def test_connect_job_refuses_every_read_beyond_the_records(case, connect_runs, sources):
    results, tables = connect_runs
    named = _refused_sql(case)[1].format(**sources)
    error = results[case].get("error", "")
    assert named in error and "reads only the view 'records'" in error, results[case]
    assert _written(tables[case]) == []


@pytest.mark.parametrize("case", list(PASSES))
def test_connect_sql_over_the_records_only_still_runs(case, connect_runs):
    results, _ = connect_runs
    assert results[case] == {"rows_out": PASSES[case][1]}


@pytest.mark.parametrize("case", list(FAILS))
def test_connect_a_plan_that_does_not_analyze_names_its_cause(case, connect_runs):
    results, tables = connect_runs
    error = results[case].get("error", "")
    assert FAILS[case][1] in error and "Nothing was read from Kafka" in error, results[case]
    assert _written(tables[case]) == []
