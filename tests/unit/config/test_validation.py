"""The code in pipeline configs (schema DDL, transform SQL or Python path, cron schedule) is checked
at config load, so a typo fails at DAG parse naming the file and the field, before anything is
planned. Valid Spark SQL must keep passing: a false alarm would stop a good pipeline."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from offsetbatch.config import ConfigError, load_config, validation
from offsetbatch.config.installed import load_all
from offsetbatch.formats import ERROR, META
from offsetbatch.ops.doctor import _run, _transform
from offsetbatch.pipeline import Pipeline

BASE = {
    "name": "orders",
    "kafka": {"topics": ["orders"]},
    "value": {"format": "json", "schema": "event_id STRING, kind STRING, x STRING, event_time TIMESTAMP"},
    "sink": {"path": "/data/orders"},
}
RESERVED = [*META, "value", ERROR, "_corrupt_record"]


def _load(tmp_path, **changes):
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump({**BASE, **changes}))
    return str(path), lambda: load_config(path)


def _fails(tmp_path, field: str, message: str, **changes) -> str:
    path, load = _load(tmp_path, **changes)
    with pytest.raises(ConfigError) as err:
        load()
    text = str(err.value)
    assert text.startswith(f"{path}: invalid pipeline config: field '{field}': "), text
    assert message in text, text
    return text


# --- the five bad configs of the issue, through load_config ----------------------------------------

def test_bad_sql_names_file_field_and_position(tmp_path):
    _fails(tmp_path, "transform.sql", "not valid Spark SQL: Invalid expression / Unexpected token at line 1, "
           "column 16, near 'FRM'", transform={"sql": "SELEC event_id FRM records"})


def test_bad_ddl_names_file_field_and_position(tmp_path):
    text = _fails(tmp_path, "value.schema", "not valid Spark DDL: Expecting ) at line 1, column 23, near 'STRIN'",
                  value={"format": "json", "schema": "event_id STRING, kind STRIN"})
    assert "e.g. 'id STRING, n INT" in text  # says what to write


def test_missing_python_module_includes_the_import_error(tmp_path):
    _fails(tmp_path, "transform.python", "cannot import module 'no_such_pkg.cleaning' (ModuleNotFoundError: "
           "No module named 'no_such_pkg')", transform={"python": "no_such_pkg.cleaning.clean"})


def test_python_attribute_that_does_not_exist(tmp_path):
    _fails(tmp_path, "transform.python", "module 'offsetbatch.validation' (", transform={"python":
           "offsetbatch.validation.no_such_function"})
    _fails(tmp_path, "transform.python", "has no attribute 'no_such_function'; fix the function name",
           transform={"python": "offsetbatch.validation.no_such_function"})


def test_bad_cron_names_file_and_field(tmp_path):
    _fails(tmp_path, "airflow.schedule", "'every hour' is not a cron expression", airflow={"schedule": "every hour"})


# --- what must keep passing ------------------------------------------------------------------------

def test_shipped_configs_still_load_and_pass_every_check():
    cfg = load_all()["sample_events"]
    assert validation.check_transform_sql(cfg.transform.sql)
    assert validation.check_schema_ddl(cfg.value.schema_ddl, RESERVED)[:2] == ["event_id", "kind"]
    assert validation.check_cron(cfg.airflow.schedule) == "0 * * * *"


@pytest.mark.parametrize("sql", [
    "SELECT *, CAST(x AS INT) FROM records WHERE kind IN ('a','b')",
    "SELECT `event_id` AS `id`, date_trunc('hour', event_time) AS hour FROM records",
    "SELECT /*+ REPARTITION(4) */ kind, count(*) FILTER (WHERE x IS NOT NULL) AS n FROM records GROUP BY kind",
    "WITH k AS (SELECT * FROM records WHERE kind RLIKE '^a') SELECT * EXCEPT (x) FROM k",
    "SELECT e.* FROM records e LATERAL VIEW explode(array(1, 2)) t AS n DISTRIBUTE BY kind",
    "SELECT transform(array(1, 2), v -> v + 1) AS a, named_struct('k', kind) AS s, kafka_headers[0].key FROM records",
    "SELECT * FROM records WHERE event_time > current_timestamp() - INTERVAL 1 DAY -- trailing comment",
    "SELECT kind, x::INT AS n FROM Records\nUNION ALL\nSELECT kind, try_cast(x AS INT) FROM records",
    "SELECT * FROM records QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY kafka_offset DESC) = 1",
])
def test_valid_spark_sql_passes(tmp_path, sql):
    assert validation.check_transform_sql(sql)
    path, load = _load(tmp_path, transform={"sql": sql})
    assert load().transform.sql == sql


@pytest.mark.parametrize("ddl, names", [
    ("id STRING, amount DECIMAL(10,2), tags ARRAY<STRING>", ["id", "amount", "tags"]),
    ("a STRUCT<x: INT, y: STRING>, m MAP<STRING, BIGINT>, `select` DATE, t TIMESTAMP_NTZ", ["a", "m", "select", "t"]),
    ("a STRING COMMENT 'a -- b', b BOOLEAN NOT NULL -- trailing comment", ["a", "b"]),
    ("a BINARY,\n  b DOUBLE,\n  c FLOAT", ["a", "b", "c"]),
])
def test_valid_ddl_passes(ddl, names):
    assert validation.check_schema_ddl(ddl, RESERVED) == names


def test_python_transform_that_imports_passes(tmp_path, monkeypatch):
    (tmp_path / "ob_valid_transform_mod.py").write_text("def clean(df):\n    return df\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path, load = _load(tmp_path, transform={"python": "ob_valid_transform_mod.clean"})
    assert load().transform.python == "ob_valid_transform_mod.clean"


@pytest.mark.parametrize("cron", ["0 * * * *", "@hourly", "@daily", "*/15 * * * *", "5 0-23/2 * * MON-FRI"])
def test_valid_cron_passes(cron):
    assert validation.check_cron(cron) == cron


# --- the checks themselves -------------------------------------------------------------------------

@pytest.mark.parametrize("sql, message", [
    ("", "is empty"),
    ("SELECT a FROM records; SELECT b FROM records", "exactly one query (SELECT ... FROM records), found 2"),
    ("DROP TABLE records", "must be a query (SELECT ... FROM records), got DROP"),
    ("INSERT INTO t SELECT * FROM records", "must be a query"),
    ("SELECT 1", "does not read the view 'records'"),
    ("SELECT a FROM records WHERE", "missing for WHERE at line 1, column 23, near 'WHERE'"),
    ("SELECT a FROM records WHERE kind = 'a", "an unclosed quote, backtick or comment?"),
    ("SELECT a,\n       b\nFRM records", "at line 3, column 5, near 'records'"),
])
def test_bad_sql(sql, message):
    with pytest.raises(ValueError) as err:
        validation.check_transform_sql(sql)
    assert message in str(err.value)
    assert "\x1b[" not in str(err.value)  # no terminal colour codes from sqlglot


@pytest.mark.parametrize("ddl, message", [
    ("", "is empty"),
    ("id", "column 'id' has no type"),
    ("id STRING,, n INT", "empty column definition (',,' or a leading ',') at line 1, column 11"),
    ("id STRING,", "ends with ','"),
    ("a INT) AS SELECT 1 --", "unmatched ')' at line 1, column 6"),
    ("a INT; DROP TABLE x", "without ';'"),
    ("a INT, b ARRAY<STRING", "Expecting >"),
    ("a INT,\n b STRIN", "at line 2, column 4, near 'STRIN'"),
    ("a INT, A STRING", "field 'A' is declared twice"),
    ("Value STRING", "field 'Value' clashes with the column 'value'"),
    ("_error STRING", "clashes with the column '_error'"),
])
def test_bad_ddl(ddl, message):
    with pytest.raises(ValueError) as err:
        validation.check_schema_ddl(ddl, RESERVED)
    assert message in str(err.value)


def test_python_module_that_raises_at_import(tmp_path, monkeypatch):
    (tmp_path / "ob_broken_transform_mod.py").write_text("import no_such_dependency_xyz\n\ndef clean(df):\n    return df\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"cannot import module 'ob_broken_transform_mod' \(ModuleNotFoundError: "
                                         r"No module named 'no_such_dependency_xyz'\)"):
        validation.check_python_callable("ob_broken_transform_mod.clean")


def test_python_path_to_something_not_callable():
    with pytest.raises(ValueError, match="'offsetbatch.validation.VIEW' is a str, not a function"):
        validation.check_python_callable("offsetbatch.validation.VIEW")


@pytest.mark.parametrize("cron, message", [
    ("every hour", "'every hour' is not a cron expression"),
    ("61 * * * *", "out of range"),
    ("0 * * *", "is not a cron expression"),
    ("0 0 * * * *", "has 6 fields"),
    ("@quarterly", "is not a cron expression"),  # Airflow knows it, the plan task's croniter does not
])
def test_bad_cron(cron, message):
    with pytest.raises(ValueError) as err:
        validation.check_cron(cron)
    assert message in str(err.value) and "'0 * * * *' (hourly)" in str(err.value)


# --- doctor -------------------------------------------------------------------------------------

def test_doctor_reports_the_checks(tmp_path):
    path, load = _load(tmp_path, transform={"sql": "SELECT event_id, kind FROM records"})
    check = _run("orders: schema, transform, schedule", lambda: _transform(Pipeline(load())), "fix")
    assert check.ok, check
    assert "value.schema: 4 field(s)" in check.detail and "transform.sql: a Spark SQL query over 'records'" in check.detail


def test_doctor_fails_when_the_python_transform_no_longer_imports(tmp_path, monkeypatch):
    """The config loaded where the module was importable; doctor runs where it is not."""
    module = tmp_path / "ob_doctor_transform_mod.py"
    module.write_text(textwrap.dedent("""\
        def clean(df):
            return df
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    path, load = _load(tmp_path, transform={"python": "ob_doctor_transform_mod.clean"})
    cfg = load()
    module.unlink()
    monkeypatch.delitem(__import__("sys").modules, "ob_doctor_transform_mod")
    check = _run("orders: schema, transform, schedule", lambda: _transform(Pipeline(cfg)), "fix it")
    assert not check.ok and "cannot import module 'ob_doctor_transform_mod'" in check.detail, check
