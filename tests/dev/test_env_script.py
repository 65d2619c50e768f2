"""scripts/env.sh gives valid connection JSON however often it is sourced (users source it by hand,
then `make demo` sources it again)."""

from __future__ import annotations

import json
import subprocess

from offsetbatch_dev import PROJECT_ROOT

CONNS = ("AIRFLOW_CONN_KAFKA_DEFAULT", "AIRFLOW_CONN_SPARK_DEFAULT", "AIRFLOW_CONN_OFFSETBATCH_LEDGER")


def _source(times: int, env: dict[str, str]) -> dict[str, dict]:
    script = "; ".join([f". {PROJECT_ROOT}/scripts/env.sh"] * times)
    script += "".join(f'; printf "%s\\n" "${c}"' for c in CONNS)
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    return {name: json.loads(value) for name, value in zip(CONNS, out)}


def test_sourcing_twice_keeps_valid_json():
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp"}
    once, twice = _source(1, env), _source(2, env)
    assert once == twice
    assert once["AIRFLOW_CONN_SPARK_DEFAULT"] == {"conn_type": "spark", "host": "local[*]", "extra": {"deploy-mode": "client"}}
    assert once["AIRFLOW_CONN_KAFKA_DEFAULT"]["extra"]["bootstrap.servers"] == "127.0.0.1:9092"


def test_a_connection_set_by_the_user_wins():
    mine = '{"conn_type":"postgres","host":"db","schema":"ledger"}'
    got = _source(2, {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "AIRFLOW_CONN_OFFSETBATCH_LEDGER": mine})
    assert got["AIRFLOW_CONN_OFFSETBATCH_LEDGER"] == json.loads(mine)


OVERRIDABLE = ("AIRFLOW__CORE__DAGS_FOLDER", "AIRFLOW__CORE__PLUGINS_FOLDER", "AIRFLOW__CORE__LOAD_EXAMPLES",
               "AIRFLOW_HOME", "SPARK_LOCAL_IP", "PYSPARK_PYTHON")


def _values(env: dict[str, str], names: tuple[str, ...] = OVERRIDABLE) -> dict[str, str]:
    script = f". {PROJECT_ROOT}/scripts/env.sh" + "".join(f'; printf "%s\\n" "${n}"' for n in names)
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.splitlines()))


def test_exported_values_win_over_the_defaults():
    """The header promises every value can be overridden by exporting it first: a test or second
    project's DAG and plugin folders must survive sourcing env.sh."""
    mine = {"AIRFLOW__CORE__DAGS_FOLDER": "/srv/my-dags", "AIRFLOW__CORE__PLUGINS_FOLDER": "/srv/my-plugins",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "True", "AIRFLOW_HOME": "/srv/airflow", "SPARK_LOCAL_IP": "10.0.0.5",
            "PYSPARK_PYTHON": "/opt/python/bin/python3"}
    assert _values({"PATH": "/usr/bin:/bin", "HOME": "/tmp", **mine}) == mine


def test_defaults_point_at_this_project():
    got = _values({"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    assert got["AIRFLOW__CORE__DAGS_FOLDER"] == f"{PROJECT_ROOT}/dags"
    assert got["AIRFLOW__CORE__PLUGINS_FOLDER"] == f"{PROJECT_ROOT}/plugins"
    assert got["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    assert got["AIRFLOW_HOME"] == f"{PROJECT_ROOT}/.local/airflow"
