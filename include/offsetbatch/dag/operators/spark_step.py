"""What both spark_job operators do around the Spark work itself: read the config and the Kafka
secrets, count an attempt for the batches still planned (or skip), and after a failure tell a
redundant attempt (skipped) from a real one (one line naming pipeline, batches, ranges, cause)."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any, Iterator

from offsetbatch.dag.tasks import SparkSubmission
from offsetbatch.pipeline import Pipeline


def prepare(config_path: str, context: Any, plan_task_id: str) -> tuple[Pipeline, dict[str, str], SparkSubmission]:
    """The pipeline, the Kafka secrets and the submission; ``AirflowSkipException`` when there is
    nothing to run. A bad config or Kafka connection fails every attempt alike (no retry)."""
    from airflow.exceptions import AirflowSkipException

    from offsetbatch.dag.retry_policy import fail_without_retry
    from offsetbatch.dag.tasks import NothingToRun, spark_job_secrets, spark_submission

    with fail_without_retry():
        pipeline = Pipeline.load(config_path)
        secrets = spark_job_secrets(pipeline)  # before the ledger counts an attempt
        try:
            submission = spark_submission(pipeline, context["ti"].xcom_pull(task_ids=plan_task_id),
                                          context["ti"].try_number)
        except NothingToRun as nothing:
            raise AirflowSkipException(str(nothing)) from None
    return pipeline, secrets, submission


@contextmanager
def failure_explained(pipeline: Pipeline, submission: SparkSubmission, log: logging.Logger) -> Iterator[None]:
    """Around the Spark work: an attempt that lost to another run's commit is skipped, a real
    failure logs its one line and propagates: retried by Airflow, unless the job's error is one no
    retry fixes (a transform that does not analyze, a writer schema the reader cannot read), which
    fails the task at once instead of costing another Spark job."""
    from airflow.exceptions import AirflowSkipException
    from airflow.sdk.exceptions import AirflowFailException

    from offsetbatch.dag.retry_policy import is_permanent, names_permanent
    from offsetbatch.dag.tasks import spark_error_types, spark_failure, spark_redundant

    try:
        yield
    except Exception as exc:
        reason = spark_redundant(pipeline, submission)
        if reason:
            raise AirflowSkipException(reason) from None
        line = spark_failure(pipeline, submission, exc)
        log.error(line)
        if is_permanent(exc) or names_permanent(spark_error_types(pipeline, submission)):
            raise AirflowFailException(f"{line} No retry fixes this error: fix it, then clear the task.") from exc
        raise
