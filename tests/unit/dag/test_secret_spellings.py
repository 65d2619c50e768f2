"""No password in any spelling of a ledger URL or a ``spark.conf`` setting reaches what a pipeline's DAG
shows or carries (issue 58, item 2): its ``doc_md``, the DAG as Airflow serializes it (into its
database, for every UI user), the spark_job operator's ``conf`` and spark-submit's argv (the
provider's hook builds it from that conf). Built by the real DAG factory."""

from __future__ import annotations

import json

import pytest
import yaml

from offsetbatch.dag.factory import pipeline_dags, raise_config_errors
from offsetbatch.errors import ConfigError

S = "S3cr3tPw"
HOST = "ob_user@db.example.internal:6543/warehouse"
LEDGER_SPELLINGS = {  # spelling -> (ledger.url, what doc_md shows instead)
    "?password=": (f"postgresql+psycopg2://{HOST}?password={S}", f"postgresql+psycopg2://{HOST}?password=***"),
    "?sslpassword=": (f"postgresql+psycopg2://{HOST}?sslmode=require&sslpassword={S}",
                      f"postgresql+psycopg2://{HOST}?sslmode=require&sslpassword=***"),
    "&token=": (f"postgresql+psycopg2://{HOST}?sslmode=require&token={S}",
                f"postgresql+psycopg2://{HOST}?sslmode=require&token=***"),
    ";password= (JDBC)": (f"postgresql+psycopg2://{HOST};password={S}", f"postgresql+psycopg2://{HOST};password=***"),
    "user:password@": (f"postgresql+psycopg2://ob_user:{S}@db.example.internal:6543/warehouse",
                       "postgresql+psycopg2://ob_user:***@db.example.internal:6543/warehouse"),
}
CONF_SPELLINGS = {  # spelling -> a spark.conf entry the name check of issue 41 let through
    "Azure account key": ("spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net", S),
    "JAAS password": ("spark.hadoop.kafka.sasl.jaas.config",
                      f'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="{S}";'),
    "JDBC URL password": ("spark.sql.catalog.lake.uri", f"jdbc:postgresql://db:5432/catalog?user=u&password={S}"),
}
ORDINARY = ("spark.sql.shuffle.partitions", "7")


def _config(tmp_path, ledger: str, conf: dict[str, str]) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "p", "kafka": {"topics": ["t"]}, "sink": {"path": str(tmp_path / "t")},
                                    "ledger": {"url": ledger},
                                    "spark": {"runner": "spark-submit", "conf": conf}}))  # argv is the subject
    return str(path)


def _carried(dag) -> dict[str, str]:
    """What the DAG shows and carries, as text: doc_md, Airflow's serialization, the operator's conf,
    and the spark-submit command line its hook builds."""
    from airflow.serialization.serialized_objects import DagSerialization

    spark_job = dag.get_task("spark_job")
    return {"doc_md": dag.doc_md, "serialized DAG": json.dumps(DagSerialization.to_dict(dag), default=str),
            "operator conf": json.dumps(spark_job.conf),
            "spark-submit argv": " ".join(spark_job._get_hook()._build_spark_submit_command("job.py"))}


@pytest.mark.parametrize("spelling", LEDGER_SPELLINGS)
def test_no_spelling_of_a_ledger_password_is_in_the_dag(tmp_path, spelling):
    url, shown = LEDGER_SPELLINGS[spelling]
    dag = pipeline_dags(_config(tmp_path, url, dict([ORDINARY])))["offsetbatch_p"]
    carried = _carried(dag)
    assert [where for where, text in carried.items() if S in text] == []
    assert f"(`{shown}`)" in carried["doc_md"]  # the ledger is still named, its secret masked
    assert "--conf spark.sql.shuffle.partitions=7" in carried["spark-submit argv"]  # the probe sees the conf


@pytest.mark.parametrize("spelling", CONF_SPELLINGS)
def test_a_secret_spark_setting_builds_no_dag_and_its_import_error_names_only_the_key(tmp_path, spelling):
    """Refused at load, as issue 41's names are: the setting never reaches the operator's conf,
    spark-submit's argv or the serialized DAG, and the error says where such a key belongs."""
    key, value = CONF_SPELLINGS[spelling]
    path = _config(tmp_path, f"sqlite:///{tmp_path}/ledger.db", dict([ORDINARY, (key, value)]))
    assert pipeline_dags(path) == {}
    with pytest.raises(ConfigError) as err:
        raise_config_errors(path)  # the DAG file's import error, shown to every UI user
    text = str(err.value)
    assert S not in text
    assert f"field 'spark.conf': Value error, {key} would put a secret on spark-submit's command line" in text
    assert "hadoop.security.credential.provider.path" in text and "kafka.conn_id" in text


def test_the_same_config_without_the_secret_carries_its_settings_everywhere(tmp_path):
    """The control of the test above: an ordinary setting does reach conf, argv and the serialized
    DAG, so their absence there is the refusal's doing."""
    dag = pipeline_dags(_config(tmp_path, f"sqlite:///{tmp_path}/ledger.db", dict([ORDINARY])))["offsetbatch_p"]
    carried = _carried(dag)
    assert all("spark.sql.shuffle.partitions" in carried[where]
               for where in ("serialized DAG", "operator conf", "spark-submit argv")), carried


class _Stop(Exception):
    pass


@pytest.mark.parametrize("spelling", LEDGER_SPELLINGS)
def test_no_spelling_of_a_ledger_password_is_in_the_lag_triggers_warning(tmp_path, monkeypatch, capsys, spelling):
    """The lag trigger's real poll against a ledger nothing answers (port 1): it warns, naming the
    ledger (``LedgerUnreachableError``), and backs off; the test stops it at its first sleep."""
    import asyncio

    from offsetbatch.dag import lag_trigger

    async def sleep(seconds):
        raise _Stop

    url = LEDGER_SPELLINGS[spelling][0].replace("db.example.internal:6543", "127.0.0.1:1")
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "p", "kafka": {"topics": ["t"]}, "sink": {"path": str(tmp_path / "t")},
                                    "ledger": {"url": url}, "airflow": {"schedule": None,
                                                                       "trigger": {"min_records": 10}}}))
    monkeypatch.setattr(lag_trigger.asyncio, "sleep", sleep)
    trigger = lag_trigger.LagTrigger(config_path=str(path), min_records=10, max_delay=None, poll=5.0)

    async def first_poll():
        stream = trigger.run()
        try:
            await stream.__anext__()
        finally:
            await stream.aclose()

    with pytest.raises(_Stop):
        asyncio.run(first_poll())
    logged = capsys.readouterr().out  # the trigger's own logger (structlog, as in the triggerer)
    assert "pipeline p: lag trigger could not read the waiting records (LedgerUnreachableError: cannot reach the " \
           "ledger at postgresql+psycopg2://" in logged, logged
    assert S not in logged
