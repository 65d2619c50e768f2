"""``BatchSparkConnectOperator``: the spark_job task on a long-running Spark Connect server.

The task runs the job's own code (``offsetbatch.job.run.run_batches``) in its process,
as a Spark Connect client: the server (``offsetbatch-stack spark-connect start``, or any Spark
Connect endpoint with Spark's Kafka connector on its classpath) already has a JVM, a driver and warm
code, so a run starts no JVM. The Kafka secrets stay in this process's memory: they reach the
server as the read's options, which Spark redacts in plans, the UI and logs. The default runner
(``spark.runner: connect``), on the server of ``spark.connect_conn_id`` (an Airflow connection of
type ``spark_connect``, the Spark provider's; ``spark_connect_default`` unless named);
``spark.runner: spark-submit`` is ``BatchSparkSubmitOperator``. A server that does not answer, or
goes away mid-job, fails the task naming it within the connection's ``answer_timeout``
(``dag.connect_server``), never a hang.
"""

from __future__ import annotations

from typing import Any

from airflow.models import BaseOperator

from offsetbatch.dag.operators.lineage import BatchLineage


class BatchSparkConnectOperator(BatchLineage, BaseOperator):
    """Run the batches the upstream plan task returned on a Spark Connect server.

    :param config_path: the pipeline's YAML file
    :param conn_id: an Airflow ``spark_connect`` connection (host, port, optional user/token/SSL)
    :param conf: Spark SQL settings for this run's session (the pipeline's ``spark.conf``); settings
        that only apply at JVM start (memory, jars) belong to the server
    :param plan_task_id: task whose XCom holds the plan
    """

    ui_color = "#f4a460"

    def __init__(self, *, config_path: str, conn_id: str, conf: dict[str, str] | None = None,
                 plan_task_id: str = "plan", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config_path = config_path
        self.conn_id = conn_id
        self.conf = dict(conf or {})
        self.plan_task_id = plan_task_id

    def execute(self, context: Any) -> str:
        from pyspark.sql import SparkSession

        from offsetbatch.config import spark_runs_at_driver_start
        from offsetbatch.dag.connect_server import ConnectServer, watched
        from offsetbatch.dag.operators.spark_step import failure_explained, prepare
        from offsetbatch.dag.retry_policy import fail_without_retry
        from offsetbatch.job.run import SQL_DEFAULTS, run_batches
        from offsetbatch.jobspec import JobSpec

        self.remember_plan(context)
        with fail_without_retry():  # an undefined connection or a bad extra: no retry fixes it
            server = ConnectServer.from_connection(self.conn_id)
        pipeline, secrets, submission = prepare(self.config_path, context, self.plan_task_id)
        with failure_explained(pipeline, submission, self.log):
            server.check()  # a server that is down or silent fails here, within its answer_timeout
            spark = SparkSession.builder.remote(server.url).create()  # a session of its own: temp views, conf
            try:
                with watched(server, spark):
                    for key, value in {**SQL_DEFAULTS, **self.conf}.items():  # the pipeline's own win
                        if not spark_runs_at_driver_start(key):
                            spark.conf.set(key, value)
                        else:
                            self.log.warning("pipeline %s: spark.conf %s applies when a Spark driver starts, not to "
                                             "a Spark Connect session: set it on the server, or set spark.runner: "
                                             "spark-submit", pipeline.name, key)
                    run_batches(spark, [JobSpec.load(u) for u in submission.spec_uris], submission.attempt, secrets)
            finally:
                spark.stop()  # the session, not the server
        return submission.attempt
