"""What the Spark job's environment keeps of the task's: what Spark, Java, Hadoop and Python need (an
allow-list), and no secret (issue 41, case 8: Airflow's own secrets reached the transform)."""

from __future__ import annotations

import os

from offsetbatch.dag.job_environment import job_environment

TASK = {
    "PATH": "/usr/bin", "JAVA_HOME": "/usr/lib/jvm/java-17", "PYSPARK_PYTHON": "/venv/bin/python",
    "SPARK_LOCAL_IP": "127.0.0.1", "_SPARK_AUTH_SECRET": "spark-own", "HADOOP_TOKEN_FILE_LOCATION": "/tmp/t",
    "OFFSETBATCH_FAULTS": "", "AIRFLOW_HOME": "/opt/airflow", "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
    "AIRFLOW_CONN_KAFKA_DEFAULT": '{"password": "p1"}', "AIRFLOW_VAR_API_KEY": "v1",
    "AIRFLOW__CORE__FERNET_KEY": "f1", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://u:p2@db/airflow",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD": "cat /run/conn", "AIRFLOW__API_AUTH__JWT_SECRET": "j1",
    "OFFSETBATCH_KAFKA_PASSWORD": "p3", "GITHUB_TOKEN": "t1", "MY_SERVICE_CREDENTIALS": "c1",
    "AIRFLOW__API__SECRET_KEY": "k1", "AIRFLOW__SECRETS__BACKEND_KWARGS": '{"token": "k2"}',
    "AIRFLOW__CELERY__BROKER_URL": "redis://:k3@redis", "AIRFLOW__OPENLINEAGE__TRANSPORT": '{"api_key": "k4"}',
    "AWS_SECRET_ACCESS_KEY": "k5", "AWS_ACCESS_KEY_ID": "k6", "LANG": "C.UTF-8", "TMPDIR": "/tmp",
    "AWS_REQUEST_CHECKSUM_CALCULATION": "WHEN_REQUIRED",  # the SDK's behaviour, which S3A in the JVM reads
    "HTTPS_PROXY": "http://proxyuser:k7@proxy:3128", "NO_PROXY": "127.0.0.1",  # a proxy with a password: dropped
}


def test_the_job_keeps_what_spark_needs_and_no_secret():
    env = job_environment(TASK)
    assert set(env) == {"PATH", "JAVA_HOME", "PYSPARK_PYTHON", "SPARK_LOCAL_IP", "_SPARK_AUTH_SECRET",
                        "HADOOP_TOKEN_FILE_LOCATION", "OFFSETBATCH_FAULTS", "LANG", "TMPDIR",
                        "AWS_REQUEST_CHECKSUM_CALCULATION", "NO_PROXY"}
    secrets = ("p1", "v1", "f1", "p2", "j1", "p3", "t1", "c1", "k1", "k2", "k3", "k4", "k5", "k6", "k7")
    assert not [v for v in secrets if v in "".join(env.values())]


def test_the_operator_starts_spark_submit_from_the_scrubbed_environment(monkeypatch):
    """The operator's own hook, up to the process start: Popen gets the scrubbed environment plus the
    operator's ``env_vars``, whatever the provider's hook would have started from."""
    from airflow.providers.apache.spark.hooks import spark_submit as hook_module

    from offsetbatch.dag.operators.spark_submit import BatchSparkSubmitOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_UNIT", '{"conn_type": "spark", "host": "local[1]"}')
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_UNIT", '{"conn_type": "kafka", "password": "p1"}')
    monkeypatch.setenv("OFFSETBATCH_KAFKA_PASSWORD", "p3")
    started = {}

    class Started(Exception):
        pass

    def popen(cmd, **kwargs):
        started.update(cmd=cmd, env=kwargs["env"])
        raise Started

    monkeypatch.setattr(hook_module.subprocess, "Popen", popen)
    op = BatchSparkSubmitOperator(task_id="spark_job", config_path="p.yaml", conn_id="spark_unit",
                                  env_vars={"MY_SETTING": "1"})
    try:
        op._get_hook().submit("job.py")
    except Started:
        pass
    assert started["cmd"][-1] == "job.py"
    env = started["env"]
    assert env["MY_SETTING"] == "1" and env["PATH"] == os.environ["PATH"]
    assert not [k for k in env if k.startswith("AIRFLOW_CONN_")] and "p3" not in env.values()
