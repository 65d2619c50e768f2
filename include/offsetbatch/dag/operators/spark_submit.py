"""``BatchSparkSubmitOperator``: one spark-submit for the batches a run planned, through the
pipeline's Spark connection, with the cached Kafka connector jars.

What to submit (the batches still planned, an attempt id of their own, the job's arguments) and
whether a failure was only a redundant attempt are decided in ``offsetbatch.dag.tasks``; this operator
only submits, and skips (so the commit is skipped too) when there is nothing to run. The Kafka
connection's secrets go to the job in a file only this user can read, named by path in the
arguments and removed when the job ends.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from offsetbatch.dag.driver_jvm import spark_defaults, with_driver_gc
from offsetbatch.dag.operators.lineage import BatchLineage
from offsetbatch.dag.spark_jars import job_jars
from offsetbatch.paths import SPARK_APP

JOB = str(SPARK_APP)


def openlineage_installed() -> bool:
    """Whether Airflow's OpenLineage provider is importable (nothing about lineage is done without it)."""
    import importlib.util

    return importlib.util.find_spec("airflow.providers.openlineage") is not None


class _ScrubbedSparkSubmitHook(SparkSubmitHook):
    """spark-submit started from the task's environment less its secrets (``dag.job_environment``).

    The provider's hook starts the process from ``os.environ`` plus ``env_vars`` whenever it has
    ``env_vars`` (it sets ``_env`` while building the command); here the process always starts from
    the scrubbed environment, with the operator's ``env_vars`` on top.
    """

    def _build_spark_submit_command(self, application: str) -> list[str]:
        command = super()._build_spark_submit_command(application)
        self._env = None  # else submit() would start from os.environ again
        return command

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        from offsetbatch.dag.job_environment import job_environment

        extra = {key: str(value) for key, value in (self._env_vars or {}).items()}
        kwargs["env"] = {**job_environment(), **extra}
        return super().submit(application, **kwargs)


class BatchSparkSubmitOperator(BatchLineage, SparkSubmitOperator):
    """Run the packaged Spark application (``offsetbatch.paths.SPARK_APP``, the entry of
    ``offsetbatch.job.run``) for the batches the upstream plan task returned, its driver on the
    throughput garbage collector unless the pipeline or spark-defaults.conf chooses one
    (``dag.driver_jvm``).

    :param config_path: the pipeline's YAML file (the ledger is checked before submitting)
    :param plan_task_id: task whose XCom holds the plan (``needs_work`` and ``batches``, each with
        ``batch_id`` and ``spec``)
    :param kwargs: everything ``SparkSubmitOperator`` takes (``conn_id``, ``conf``, ...)
    """

    ui_color = "#f4a460"

    def __init__(self, *, config_path: str, plan_task_id: str = "plan", **kwargs: Any) -> None:
        kwargs.setdefault("application", JOB)
        # With the OpenLineage provider, the job's own OpenLineage events (an openlineage-spark
        # listener, if the user installs one) nest under this task: the provider's settings.
        kwargs.setdefault("openlineage_inject_parent_job_info", openlineage_installed())
        super().__init__(**kwargs)
        self.config_path = config_path
        self.plan_task_id = plan_task_id

    def _get_hook(self) -> SparkSubmitHook:
        # The provider builds its hook from some 30 operator fields; the same object with the
        # scrubbed submit (a subclass that adds no state) keeps that list in one place: theirs.
        hook = super()._get_hook()
        hook.__class__ = _ScrubbedSparkSubmitHook
        return hook

    def _refuse_cluster_mode(self) -> None:
        """Before the ledger counts an attempt: the job's secrets file is written on this worker, and
        a driver started elsewhere (``--deploy-mode cluster``) could not read it; Spark standalone
        refuses Python applications in cluster mode anyway. Client mode or a Connect server it is."""
        from airflow.sdk.exceptions import AirflowFailException

        # A hook of its own: the provider's execute() builds the one that submits, from the
        # application arguments set after this check.
        connection = self._get_hook()._connection
        if connection.get("deploy_mode") == "cluster":
            raise AirflowFailException(
                f"{self.dag_id}.{self.task_id}: the Spark connection {self._conn_id!r} (master "
                f"{connection.get('master')}) asks for --deploy-mode cluster, which offsetbatch refuses: the driver "
                f"would start on another host than this Airflow worker, where the job's secrets file (Kafka login, "
                f"object store keys; written 0600 here, never sent in arguments) does not exist, and Spark "
                f"standalone runs no Python application in cluster mode. Set the connection's extra "
                f"'deploy-mode' to 'client' (the driver runs in this task), or run the job on a Spark Connect "
                f"server (spark.runner: connect): its sessions carry the secrets in memory, wherever the task "
                f"runs. No attempt was counted.")

    def execute(self, context: Any) -> str:
        from offsetbatch.dag.operators.spark_step import failure_explained, prepare
        from offsetbatch import job_secrets

        self.remember_plan(context)
        self._refuse_cluster_mode()
        pipeline, secrets, submission = prepare(self.config_path, context, self.plan_task_id)
        if not self.jars:
            from offsetbatch.dag.retry_policy import fail_without_retry

            with fail_without_retry():  # a jar missing now is missing on the next attempt too
                self.jars = ",".join(job_jars(pipeline.cfg.sink.root, pipeline.cfg.value.format, pipeline.cfg.key.format))
        self.name = submission.name
        self.conf = with_driver_gc(self.conf or {}, spark_defaults())
        secrets_file = None
        try:
            with failure_explained(pipeline, submission, self.log):
                secrets_file = job_secrets.write(secrets) if secrets else None
                self.application_args = submission.application_args + (
                    [job_secrets.ARG, str(secrets_file)] if secrets_file else [])
                super().execute(context)
        finally:
            job_secrets.remove(secrets_file)  # the job read it at start; nothing keeps it after the run
        return submission.attempt
