"""Pipeline configs: the shipped ones load; bad ones fail naming the file and the field."""

from __future__ import annotations

import time

import pytest
import yaml

from offsetbatch.config import ConfigError, load_config
from offsetbatch.config.installed import load_all

GOOD = {
    "name": "orders",
    "kafka": {"topics": ["orders"]},
    "value": {"format": "json", "schema": "id STRING, amount DECIMAL(10,2), tags ARRAY<STRING>", "required": ["id"]},
    "sink": {"path": "/data/orders"},
}


def _write(tmp_path, doc) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc) if isinstance(doc, dict) else doc)
    return str(path)


def test_shipped_configs_load():
    configs = load_all()
    assert "sample_events" in configs
    assert configs["sample_events"].sink.path.endswith("/tables/sample_events")


def test_defaults(tmp_path):
    cfg = load_config(_write(tmp_path, GOOD))
    assert cfg.starting_policy == "earliest" and cfg.on_data_loss == "fail"
    assert cfg.dag_id == "offsetbatch_orders" and cfg.group_id == "offsetbatch.orders"
    assert cfg.airflow.schedule == "0 * * * *"


@pytest.mark.parametrize("change, field, message", [
    ({"kafka": {"topics": ["a"], "pattern": "a.*"}}, "kafka", "exactly one of 'topics'"),
    ({"kafka": {"pattern": "(unclosed"}}, "kafka", "not a valid regex"),
    ({"starting_policy": "yesterday"}, "starting_policy", "'earliest', 'latest' or an ISO-8601"),
    ({"starting_policy": "2026-01-01T00:00:00"}, "starting_policy", "needs a timezone"),
    ({"on_data_loss": "ignore"}, "on_data_loss", "'fail' or 'skip'"),
    ({"caps": {"max_records_per_batch": 0}}, "caps.max_records_per_batch", "greater than 0"),
    ({"value": {"format": "json"}}, "value", "needs a 'schema'"),
    ({"value": {"format": "json", "schema": "id STRING", "required": ["nope"]}}, "value", "not in the schema: nope"),
    ({"sink": {"path": "relative/dir"}}, "sink.path", "absolute path or a URI"),
    ({"transform": {"sql": "SELECT 1", "python": "m.f"}}, "transform", "not both"),
    ({"transform": {"sql": "SELEC event_id FRM records"}}, "transform.sql",
     "not valid Spark SQL: Invalid expression / Unexpected token at line 1, column 16, near 'FRM'"),
    ({"transform": {"sql": "SELECT event_id FROM events"}}, "transform.sql", "does not read the view 'records'"),
    ({"transform": {"python": "no_such_module_xyz.clean"}}, "transform.python",
     "cannot import module 'no_such_module_xyz' (ModuleNotFoundError: No module named 'no_such_module_xyz')"),
    ({"transform": {"python": "offsetbatch.formats.no_such_function"}}, "transform.python",
     "module 'offsetbatch.formats' (/"),
    ({"transform": {"python": "offsetbatch.formats.no_such_function"}}, "transform.python",
     "has no attribute 'no_such_function'"),
    ({"transform": {"python": "clean"}}, "transform.python", "must be a dotted path 'module.function'"),
    ({"value": {"format": "json", "schema": "id STRIN, n INT"}}, "value.schema",
     "not valid Spark DDL: Expecting ) at line 1, column 4, near 'STRIN'"),
    ({"value": {"format": "json", "schema": "id STRING, kafka_offset BIGINT"}}, "value.schema",
     "field 'kafka_offset' clashes with the column 'kafka_offset' the job adds"),
    ({"airflow": {"schedule": "every hour"}}, "airflow.schedule", "'every hour' is not a cron expression"),
    ({"airflow": {"schedule": "0 0 * * * *"}}, "airflow.schedule", "has 6 fields"),
    ({"airflow": {"schedule": "0 0 31 2 *"}}, "airflow.schedule", "'0 0 31 2 *' never fires"),
    ({"airflow": {"start_date": "2026-06-01T00:00:00+00:00", "end_date": "2026-05-01T00:00:00+00:00"}}, "airflow",
     "end_date 2026-05-01T00:00:00+00:00 is not after start_date 2026-06-01T00:00:00+00:00"),
    ({"value": {"format": "json", "schema": "id STRING, amount DECIMAL(99,200)"}}, "value.schema",
     "DECIMAL(99, 200) is not a Spark decimal: precision 1..38 and scale 0..precision"),
    ({"sink": {"path": "/"}}, "sink.path", "'/' is the root of its filesystem or bucket"),
    ({"sink": {"path": "s3a://bucket"}}, "sink.path", "'s3a://bucket' is the root of its filesystem or bucket"),
    ({"sink": {"path": "ftp://host/tables"}}, "sink.path", "storage scheme 'ftp' is not one of file, hdfs, s3a"),
    ({"ledger": {"url": "sqlite:///relative_ledger.db"}}, "ledger.url",
     "'sqlite:///relative_ledger.db' is a relative SQLite path, which each task resolves against its own working "
     "directory"),
    ({"ledger": {"url": "sqlite://"}}, "ledger.url", "is an in-memory SQLite database"),
    ({"sink": {"type": "iceberg", "path": "/data/staging", "namespace": "lake", "table": "orders",
               "warehouse": "/data/warehouse", "catalog": "my catalog"}}, "sink.catalog",
     "catalog 'my catalog' is neither a SQLAlchemy URL (postgresql+psycopg2://user@host/db, "
     "sqlite:////path/catalog.db) nor an Airflow connection id"),
    ({"transform": {"sql": "SELECT id, reflect('java.lang.System', 'getenv', 'AIRFLOW_CONN_KAFKA') AS e FROM records"}},
     "transform", "'sql' reaches past the records into the JVM or the job hosts' files (reflect(...))"),
    ({"transform": {"sql": "SELECT r.id, t.value FROM records r JOIN text.`/etc/passwd` t ON true"}}, "transform",
     "(text.`/etc/passwd`)"),
    ({"transform": {"sql": "SELECT id, java_method('java.lang.Runtime', 'getRuntime') FROM records"}}, "transform",
     "java_method(...)"),
    # issue 41, case 8: Spark's variable substitution and IDENTIFIER over a path reach the same places
    ({"transform": {"sql": "SELECT id, '${env:AWS_SECRET_ACCESS_KEY}' AS k FROM records"}}, "transform",
     "'sql' reaches past the records into the JVM or the job hosts' files (${env:AWS_SECRET_ACCESS_KEY})"),
    ({"transform": {"sql": "SELECT r.id, h.value FROM records r CROSS JOIN IDENTIFIER('text.`/etc/hostname`') h"}},
     "transform", "(IDENTIFIER('text.`/etc/hostname`'))"),
    ({"transform": {"sql": "SELECT id, '${OB_SECRET_JSON}' AS c FROM records"}}, "transform",
     "(${OB_SECRET_JSON})"),
    # issue 58, item 1: any qualified table is not the records (the job's own check on Spark's plan
    # refuses them whatever the spelling: tests/integration/spark/test_transform_reads.py)
    *[({"transform": {"sql": f"SELECT r.id FROM records r CROSS JOIN {table} x"}}, "transform",
       f"'sql' reads tables other than the view 'records' ({named})")
      for table, named in [
          ("`org.apache.spark.sql.execution.datasources.text.TextFileFormat`.`/etc/hostname`",
           "`org.apache.spark.sql.execution.datasources.text.TextFileFormat`.`/etc/hostname`"),
          ("image.`/var/images`", "image.`/var/images`"), ("libsvm.`/data/x.libsvm`", "libsvm.`/data/x.libsvm`"),
          ("IDENTIFIER('image.`/var/images`')", "IDENTIFIER('image.`/var/images`')"),
          ("binaryFile.`/etc/hostname`", "binaryFile.`/etc/hostname`"), ("global_temp.orders", "global_temp.`orders`"),
          ("spark_catalog.default.orders", "spark_catalog.default.`orders`")]],
    ({"transform": {"sql": "SELECT TRANSFORM(id) USING 'cat /etc/hostname' AS (h) FROM records"}}, "transform",
     "'sql' reaches past the records into the JVM or the job hosts' files (TRANSFORM ... USING 'cat /etc/hostname')"),
    ({"sink": {"path": "/data/orders", "event_time_column": "created_at"}}, "(top level)",
     "sink.event_time_column 'created_at' is not a column of the output (its columns: kafka_topic, kafka_partition, "
     "kafka_offset, kafka_timestamp, kafka_key, kafka_headers, id, amount, tags)"),
    ({"kafka": {"topics": ["orders"]}, "sink": {"type": "kafka", "path": "/data/staging", "topic": "orders"}},
     "(top level)", "sink.topic 'orders' is a topic this pipeline reads (kafka.topics/kafka.pattern, connection "
     "'kafka_default'): each run would write its records back into its own source"),
    ({"kafka": {"pattern": "orders.*"}, "sink": {"type": "kafka", "path": "/data/staging", "topic": "orders-clean",
                                                  "dead_letter_topic": "orders-dlq"}},
     "(top level)", "sink.topic 'orders-clean' is a topic this pipeline reads"),
    ({"sink": {"type": "kafka", "path": "/data/staging", "topic": "clean", "dead_letter_topic": "orders"}},
     "(top level)", "sink.dead_letter_topic 'orders' is a topic this pipeline reads"),
    ({"sink": {"type": "kafka", "path": "/data/staging", "topic": "clean", "dead_letter_topic": "clean"}},
     "(top level)", "sink.dead_letter_topic is sink.topic ('clean')"),
    ({"spark": {"runner": "yarn"}}, "spark.runner", "Input should be 'connect' or 'spark-submit'"),
    ({"spark": {"runner": "spark-submit", "connect_conn_id": "spark_connect_prod"}}, "spark",
     "runner is 'spark-submit' but connect_conn_id names a Spark Connect server ('spark_connect_prod')"),
    ({"name": "Bad-Name"}, "name", "should match pattern"),
    ({"colour": "blue"}, "colour", "Extra inputs are not permitted"),
    # issue 58, item 5: each names the field and the fix
    ({"starting_polcy": "latest"}, "starting_polcy", "Extra inputs are not permitted (did you mean 'starting_policy'?)"),
    ({"sink": {"path": "/data/orders", "partiton_by": ["kind"]}}, "sink.partiton_by",
     "(did you mean 'partition_by'?)"),
    ({"value": {"format": "json", "schma": "id STRING"}}, "value.schma", "(did you mean 'schema'?)"),
    ({"maintenance": {"retian": "7d"}}, "maintenance.retian", "(did you mean 'retain'?)"),
    ({"maintenance": {"retain": "-7d"}}, "maintenance.retain", "'-7d': a duration must be positive"),
    ({"maintenance": {"retain": -60}}, "maintenance.retain", "-60: a duration must be positive"),
    ({"maintenance": {"retain": 1e300}}, "maintenance.retain", "1e+300 is more than 100 years"),
    ({"maintenance": {"target_file_size": "128 parsecs"}}, "maintenance.target_file_size",
     "is not a size; write a number of bytes, or a number and a unit (B, KB, MB, GB, KiB, MiB, GiB)"),
    ({"maintenance": {"retain_snapshots": 5}}, "(top level)", "maintenance.retain_snapshots applies to Iceberg tables "
                                                              "only; a files sink keeps no snapshots"),
    ({"airflow": {"retries": True}}, "airflow.retries", "must be a number, got true"),
    ({"caps": {"max_records_per_batch": 10**30}}, "caps.max_records_per_batch",
     "Input should be less than or equal to 9223372036854775807"),
    ({"transform": {"python": "os.system"}}, "transform.python", "'os.system' is part of Python itself, not a "
                                                                 "transform"),
])
def test_bad_fields_are_named(tmp_path, change, field, message):
    doc = {**GOOD, **change}
    path = _write(tmp_path, doc)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert path in text and f"field '{field}" in text and message in text, text


def test_read_committed_implies_offset_gaps_and_refuses_their_denial(tmp_path):
    """A read_committed batch over a transaction's end holds fewer records than offsets (the marker
    takes one): without the gaps every such batch fails its commit (issue 41, case 2)."""
    committed = load_config(_write(tmp_path, {**GOOD, "kafka": {"topics": ["orders"], "isolation_level": "read_committed"}}))
    assert committed.kafka.expect_offset_gaps is True
    assert load_config(_write(tmp_path, GOOD)).kafka.expect_offset_gaps is False
    with pytest.raises(ConfigError, match=r"field 'kafka': Value error, isolation_level 'read_committed' skips "
                                          r"transaction markers and aborted records, .*remove 'expect_offset_gaps: "
                                          r"false'"):
        load_config(_write(tmp_path, {**GOOD, "kafka": {"topics": ["orders"], "isolation_level": "read_committed",
                                                         "expect_offset_gaps": False}}))


def test_missing_sink_is_named(tmp_path):
    path = _write(tmp_path, {k: v for k, v in GOOD.items() if k != "sink"})
    with pytest.raises(ConfigError, match="field 'sink': Field required"):
        load_config(path)


def test_unset_environment_variable_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("NOPE_ROOT", raising=False)
    path = _write(tmp_path, {**GOOD, "sink": {"path": "${NOPE_ROOT}/orders"}})
    with pytest.raises(ConfigError, match=r"\$\{NOPE_ROOT\} is not set"):
        load_config(path)


def test_not_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(_write(tmp_path, "name: [unclosed"))


def test_trusted_sql_may_opt_into_system_access(tmp_path):
    sql = "SELECT id, reflect('java.util.UUID', 'randomUUID') AS u FROM records"
    cfg = load_config(_write(tmp_path, {**GOOD, "transform": {"sql": sql, "allow_system_access": True}}))
    assert cfg.transform.sql == sql


def test_an_output_topic_on_another_connection_may_share_the_name(tmp_path):
    sink = {"type": "kafka", "path": "/data/staging", "topic": "orders", "conn_id": "kafka_other_cluster"}
    assert load_config(_write(tmp_path, {**GOOD, "sink": sink})).sink.topic == "orders"


def test_an_event_time_column_the_schema_declares_loads(tmp_path):
    doc = {**GOOD, "value": {"format": "json", "schema": "id STRING, created_at TIMESTAMP"},
           "sink": {"path": "/data/orders", "event_time_column": "created_at"}}
    assert load_config(_write(tmp_path, doc)).sink.event_time_column == "created_at"


def test_nondeterministic_sql_loads_with_a_warning_about_replays(tmp_path, caplog):
    sql = "SELECT id, uuid() AS row_id, current_timestamp() AS loaded_at FROM records"
    load_config(_write(tmp_path, {**GOOD, "transform": {"sql": sql}}))
    assert "transform.sql calls current_timestamp(), uuid(): a replay or re-run of a batch writes other values" \
        in caplog.text, caplog.text


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path):
    """Nine levels of nine aliases: 9**9 values once expanded; refused before anything expands it."""
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    path = _write(tmp_path, "\n".join(lines) + "\nname: orders\n")
    started = time.monotonic()
    with pytest.raises(ConfigError, match="expands to more than 100,000 values through its anchors and aliases"):
        load_config(path)
    assert time.monotonic() - started < 2


def test_yaml_anchors_of_ordinary_size_still_work(tmp_path):
    doc = ("defaults: &d {path: /data/orders}\nname: orders\nkafka: {topics: [orders]}\nsink: *d\n"
           "value: {format: raw}\n")
    with pytest.raises(ConfigError, match="'defaults': Extra inputs"):  # anchors parse; the extra key is refused
        load_config(_write(tmp_path, doc))


SECRET = "S3cr3tPw"


@pytest.mark.parametrize("change, field, shown", [
    # a mistyped URL (one slash): its password must not reach the DAG import error every UI user reads
    ({"ledger": {"url": f"postgresql+psycopg2:/user:{SECRET}@host/db"}}, "ledger.url", "postgresql+psycopg2:/user:***@host/db"),
    # issue 58: the other spellings, in validation.check_ledger_url's two messages (unparseable, relative)
    ({"ledger": {"url": f"postgresql+psycopg2:/host/db?sslpassword={SECRET}"}}, "ledger.url",
     "'postgresql+psycopg2:/host/db?sslpassword=***' is not a SQLAlchemy URL"),
    ({"ledger": {"url": f"sqlite:///ledger.db?password={SECRET}"}}, "ledger.url",
     "'sqlite:///ledger.db?password=***' is a relative SQLite path"),
    ({"sink": {"type": "iceberg", "namespace": "n", "table": "t", "warehouse": "/wh", "staging": "/st",
               "catalog": f"postgresql+psycopg2:/u:{SECRET}@h/db"}}, "sink", "postgresql+psycopg2:/u:***@h/db"),
    ({"sink": {"path": f"s3a://KEY:{SECRET}/x@bucket/events", "storage_conn_id": "s3"}}, "sink.path",
     "'s3a://KEY:***@bucket/events' holds credentials (user:password@ or a password, token or key parameter); give them to an Airflow connection"),
])
def test_a_password_in_a_bad_url_is_never_echoed(tmp_path, change, field, shown):
    """Issue 41, case 9: config errors become DAG import errors every UI user reads."""
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, {**GOOD, **change}))
    text = str(err.value)
    assert SECRET not in text and f"field '{field}" in text and shown in text, text


def test_a_ledger_connections_bad_url_is_refused_without_its_password(tmp_path, monkeypatch):
    """The same check on a URL from ledger.conn_id (an extra ``sqlalchemy_url``), whose error names the connection."""
    import json

    from offsetbatch.pipeline import Pipeline

    monkeypatch.setenv("AIRFLOW_CONN_LEDGER_X", json.dumps({"conn_type": "generic", "extra": {
        "sqlalchemy_url": f"sqlite:///ledger.db?password={SECRET}"}}))
    pipeline = Pipeline.load(_write(tmp_path, {**GOOD, "ledger": {"conn_id": "ledger_x"}}))
    with pytest.raises(ConfigError) as err:
        pipeline.ledger_url()
    text = str(err.value)
    assert SECRET not in text and "the ledger connection 'ledger_x' (ledger.conn_id): 'sqlite:///ledger.db?password=***' " \
                                  "is a relative SQLite path" in text, text


@pytest.mark.parametrize("key", ["spark.hadoop.fs.s3a.secret.key", "spark.hadoop.fs.s3a.access.key",
                                 "spark.hadoop.fs.s3a.session.token", "spark.ssl.keyStorePassword",
                                 "spark.authenticate.secret"])
def test_secret_spark_settings_are_refused_pointing_at_connections(tmp_path, key):
    """spark.conf rides on spark-submit's command line, in the serialized DAG and in task logs."""
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, {**GOOD, "spark": {"conf": {key: SECRET, "spark.sql.shuffle.partitions": "4"}}}))
    text = str(err.value)
    assert f"field 'spark.conf': Value error, {key} would put a secret on spark-submit's command line" in text
    assert "sink.storage_conn_id" in text and SECRET not in text
    ok = load_config(_write(tmp_path, {**GOOD, "spark": {"conf": {
        "spark.kubernetes.driver.secretKeyRef.PW": "db-secret:password", "spark.sql.shuffle.partitions": "4"}}}))
    assert ok.spark.conf["spark.sql.shuffle.partitions"] == "4"


def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path):
    """Issue 41, case 15: YAML keeps the last of two equal keys without a word."""
    path = _write(tmp_path, "name: orders\nkafka: {topics: [orders]}\nsink:\n  path: /data/orders\n  path: /data/other\n")
    with pytest.raises(ConfigError, match=r"p.yaml: key 'path' is given twice in one mapping \(lines 4 and 5\); YAML "
                                          r"would keep only the last: remove one"):
        load_config(path)


def test_yaml_variables_are_expanded_in_paths_but_never_in_the_sql(tmp_path, monkeypatch):
    """A ``${VAR}`` holding a secret (a connection's JSON) would reach the job spec and the task log
    through the SQL: it is expanded everywhere else, and in the SQL only refused (issue 41, case 8)."""
    monkeypatch.setenv("OB_ROOT", "/data")
    monkeypatch.setenv("OB_SECRET_JSON", '{"password": "p"}')
    cfg = load_config(_write(tmp_path, {**GOOD, "sink": {"path": "${OB_ROOT}/orders"}}))
    assert cfg.sink.path == "/data/orders"
    sql = "SELECT id, '${OB_SECRET_JSON}' AS c FROM records"
    trusted = load_config(_write(tmp_path, {**GOOD, "transform": {"sql": sql, "allow_system_access": True}}))
    assert trusted.transform.sql == sql  # not expanded, even where allowed


def test_sizes_take_their_unit_and_counts_a_string_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("OB_RETRIES", "4")
    cfg = load_config(_write(tmp_path, {**GOOD, "maintenance": {"target_file_size": "128MiB"},
                                        "airflow": {"retries": "${OB_RETRIES}"}}))
    assert (cfg.maintenance.target_file_size, cfg.airflow.retries) == (128 * 2**20, 4)
    assert load_config(_write(tmp_path, {**GOOD, "maintenance": {"target_file_size": "1GB"}})).maintenance \
        .target_file_size == 10**9


@pytest.mark.parametrize("url, says", [
    ("postgresql://ob:S3cr3tPw@db:notaport/ledger", "the port of 'postgresql://ob:***@db:notaport/ledger' is "
                                                    "'notaport', not a number"),
    ("postgres://ob:S3cr3tPw@db/ledger", "PostgreSQL's URL scheme in SQLAlchemy is 'postgresql' (with its driver), not "
                                         "'postgres': write 'postgresql+psycopg2://user@host:5432/db' or"),
    ("mysql://ob:S3cr3tPw@db/ledger", "a ledger is kept in SQLite or PostgreSQL, not mysql: write "
                                      "'postgresql+psycopg2://user@host:5432/db'"),
], ids=["port", "postgres://", "mysql://"])
def test_a_ledger_url_names_the_wrong_part_and_the_supported_forms_without_its_password(tmp_path, url, says):
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, {**GOOD, "ledger": {"url": url}}))
    assert says in str(err.value) and "field 'ledger" in str(err.value) and "S3cr3tPw" not in str(err.value)


@pytest.mark.parametrize("spark, runner, connect_conn_id", [
    ({}, "connect", "spark_connect_default"),  # the fast path is the default
    ({"conf": {"spark.sql.shuffle.partitions": "4"}}, "connect", "spark_connect_default"),
    ({"connect_conn_id": "spark_connect_prod"}, "connect", "spark_connect_prod"),
    ({"runner": "connect", "conf": {"spark.driver.memory": "4g"}}, "connect", "spark_connect_default"),
    ({"runner": "spark-submit"}, "spark-submit", None),
    # what YAMLs written before spark.runner existed say, and keep meaning: spark-submit
    ({"conn_id": "spark_default"}, "spark-submit", None),
    ({"conn_id": "spark_cluster", "conf": {"spark.sql.shuffle.partitions": "4"}}, "spark-submit", None),
    ({"connect_conn_id": ""}, "spark-submit", None),  # ${OFFSETBATCH_SPARK_CONNECT:-} unset: "empty means spark-submit"
    ({"conn_id": "spark_default", "connect_conn_id": "spark_connect_default"}, "connect", "spark_connect_default"),
    ({"conf": {"spark.driver.memory": "4g"}}, "spark-submit", None),  # only a driver of its own honours it
])
def test_the_spark_runner_is_connect_unless_the_config_says_spark_submit(tmp_path, spark, runner, connect_conn_id):
    cfg = load_config(_write(tmp_path, {**GOOD, "spark": spark}))
    assert (cfg.spark.runner, cfg.spark.connect_conn_id) == (runner, connect_conn_id)
    assert cfg.spark.on_connect == (runner == "connect")


def test_the_dag_runs_the_job_where_the_runner_says(tmp_path):
    from offsetbatch.dag.factory import pipeline_dag

    for spark, operator in (({}, "BatchSparkConnectOperator"), ({"runner": "spark-submit"}, "BatchSparkSubmitOperator")):
        dag = pipeline_dag(_write(tmp_path, {**GOOD, "spark": spark}))
        assert type(dag.get_task("spark_job")).__name__ == operator
        assert ("Spark Connect server of connection `spark_connect_default`" in dag.doc_md) == (spark == {})
