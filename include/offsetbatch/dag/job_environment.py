"""The environment the Spark job starts with: what Spark, Java, Hadoop and Python need of the task's,
and nothing else.

The task's environment holds Airflow's connections and variables (``AIRFLOW_CONN_*``,
``AIRFLOW_VAR_*``), Airflow's own secrets (``AIRFLOW__CORE__FERNET_KEY``, the API's secret key, a
secrets backend's kwargs, the Celery broker's URL, an OpenLineage transport's API key) and whatever
the deployment adds (``AWS_SECRET_ACCESS_KEY``). ``spark-submit`` hands its environment to the
driver's JVM, the job's Python and every Python worker, where a transform could read it and a heap
dump or ``/proc/<pid>/environ`` shows it. So it is an allow-list: Spark's, Java's, Hadoop's and
Python's own settings, the locale, temporary folders, certificates and proxies, and offsetbatch's
own, less any of those whose name says it is a secret. The job's connections' secrets reach it in a
private file (``offsetbatch.job_secrets``), and ``spark.conf`` cannot hold one (refused at load).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from offsetbatch import redact

_KEPT_PREFIXES = ("SPARK_", "_SPARK_", "PYSPARK_", "JAVA_", "_JAVA_", "JDK_", "HADOOP_", "YARN_", "PYTHON", "LC_", "OFFSETBATCH_",
                  "OPENBLAS_", "OMP_", "MKL_", "ARROW_", "KRB5", "LD_")
_KEPT = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TMP", "TEMP",
                   "HOSTNAME", "PWD", "VIRTUAL_ENV", "TERM", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
                   "KUBECONFIG", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
                   # the AWS SDK's behaviour (S3A's client in the JVM reads them), never its credentials: an
                   # S3-compatible store needs checksums only where required (S3Proxy refuses the default)
                   "AWS_REQUEST_CHECKSUM_CALCULATION", "AWS_RESPONSE_CHECKSUM_VALIDATION", "AWS_REGION",
                   "AWS_DEFAULT_REGION", "AWS_CA_BUNDLE", "AWS_EC2_METADATA_DISABLED", "AWS_ENDPOINT_URL",
                   "AWS_ENDPOINT_URL_S3", "AWS_STS_REGIONAL_ENDPOINTS", "AWS_USE_FIPS_ENDPOINT",
                   "AWS_USE_DUALSTACK_ENDPOINT", "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE"})
# A setting whose name ends saying it is a secret (``_CMD``/``_SECRET`` variants included) is dropped
# even among the kept; Spark's own variables (``_SPARK_AUTH_SECRET``) are Spark's business.
_SECRET_NAME = re.compile(r"(PASSWORD|PASSWD|SECRET|TOKEN|FERNET_KEY|PRIVATE_KEY|SQL_ALCHEMY_CONN|CREDENTIALS?)"
                          r"(_CMD|_SECRET)?$", re.IGNORECASE)
_SPARKS_OWN = ("SPARK_", "_SPARK_", "PYSPARK_")


def is_kept(name: str) -> bool:
    """Whether the job gets variable ``name`` of the task's environment."""
    if name.startswith(_SPARKS_OWN):
        return True
    if _SECRET_NAME.search(name):
        return False
    return name in _KEPT or name.startswith(_KEPT_PREFIXES)


def job_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default: this process's) with only what ``is_kept`` allows, less any value that
    carries a URL's password (a proxy given as ``http://user:password@proxy:3128``)."""
    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if is_kept(k) and redact.url(v) == v}
