"""What the Spark job's environment keeps of the task's: everything but secrets."""

from __future__ import annotations

from offsetbatch.dag.job_environment import job_environment

TASK = {
    "PATH": "/usr/bin", "JAVA_HOME": "/usr/lib/jvm/java-17", "PYSPARK_PYTHON": "/venv/bin/python",
    "SPARK_LOCAL_IP": "127.0.0.1", "_SPARK_AUTH_SECRET": "spark-own", "HADOOP_TOKEN_FILE_LOCATION": "/tmp/t",
    "OFFSETBATCH_FAULTS": "", "AIRFLOW_HOME": "/opt/airflow", "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
    "AIRFLOW_CONN_KAFKA_DEFAULT": '{"password": "p1"}', "AIRFLOW_VAR_API_KEY": "v1",
    "AIRFLOW__CORE__FERNET_KEY": "f1", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://u:p2@db/airflow",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD": "cat /run/conn", "AIRFLOW__API_AUTH__JWT_SECRET": "j1",
    "OFFSETBATCH_KAFKA_PASSWORD": "p3", "GITHUB_TOKEN": "t1", "MY_SERVICE_CREDENTIALS": "c1",
}


def test_the_job_keeps_what_spark_needs_and_no_secret():
    env = job_environment(TASK)
    assert set(env) == {"PATH", "JAVA_HOME", "PYSPARK_PYTHON", "SPARK_LOCAL_IP", "_SPARK_AUTH_SECRET",
                        "HADOOP_TOKEN_FILE_LOCATION", "OFFSETBATCH_FAULTS", "AIRFLOW_HOME", "AIRFLOW__CORE__EXECUTOR"}
    assert not [v for v in ("p1", "v1", "f1", "p2", "j1", "p3", "t1", "c1") if v in "".join(env.values())]
