"""scripts/env.sh gives valid connection JSON however often it is sourced (users source it by hand,
then `make demo` sources it again)."""

from __future__ import annotations

import json
import subprocess

from offsetbatch.paths import PROJECT_ROOT

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
