"""The environment the Spark job starts with: the task's, less every secret it holds.

Airflow connections and variables given as environment variables (``AIRFLOW_CONN_*``,
``AIRFLOW_VAR_*``; the README's and docker-compose's way) carry passwords, and Airflow's own
secrets (``AIRFLOW__CORE__FERNET_KEY``, ``..._SQL_ALCHEMY_CONN``, the API's JWT secret) are
settings of the same kind. ``spark-submit`` hands its environment to the driver's JVM, the job's
Python and every Python worker, where a transform could read it (``reflect('java.lang.System',
'getenv', ...)``) and a heap dump or ``/proc/<pid>/environ`` shows it. The job needs none of them:
its connections' secrets reach it in a private file (``offsetbatch.job_secrets``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

# Whole families that hold secrets, and any setting whose name ends saying it is one (Airflow's
# ``_CMD``/``_SECRET`` variants of a setting included). Spark's own variables are for Spark.
_PREFIXES = ("AIRFLOW_CONN_", "AIRFLOW_VAR_")
_SECRET_NAME = re.compile(r"(PASSWORD|PASSWD|SECRET|TOKEN|FERNET_KEY|PRIVATE_KEY|SQL_ALCHEMY_CONN|CREDENTIALS?)"
                          r"(_CMD|_SECRET)?$", re.IGNORECASE)
_SPARKS_OWN = ("SPARK_", "_SPARK_", "PYSPARK_")


def is_secret(name: str) -> bool:
    if name.startswith(_SPARKS_OWN):
        return False
    return name.startswith(_PREFIXES) or bool(_SECRET_NAME.search(name))


def job_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default: this process's) without the variables ``is_secret`` names."""
    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if not is_secret(k)}
