"""The garbage collector of the job's driver JVM, the one JVM setting the spark_job task ships.

A batch job wants throughput, not short pauses: with ``local[*]`` the driver runs every task, and
G1 (the JVM's default) spends CPU on concurrent marking that the job's tasks need (on 2 cores it
cost the batch job 10-15 % of its time: docs/performance.md). So the task asks for the parallel
collector in ``spark.driver.extraJavaOptions``, added to what is already there, whether that
comes from the pipeline's ``spark.conf`` or from the installation's ``spark-defaults.conf``
(a ``--conf`` replaces the file's value, so the file's options are carried over, never dropped).
Nothing is added when either already chooses a collector. Executors of a cluster keep theirs.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

OPTION = "spark.driver.extraJavaOptions"
THROUGHPUT_GC = "-XX:+UseParallelGC"
CHOOSES_GC = re.compile(r"-XX:\+Use\w*GC\b")


def spark_defaults(env: dict[str, str] | None = None) -> dict[str, str]:
    """``spark-defaults.conf`` of the installation spark-submit runs (``SPARK_CONF_DIR``, else
    ``SPARK_HOME/conf``), read as Java properties as Spark does: a key, then ``=``, ``:`` or
    whitespace, then the value; ``#`` and ``!`` start a comment line."""
    env = os.environ if env is None else env
    folder = env.get("SPARK_CONF_DIR") or (f"{env['SPARK_HOME']}/conf" if env.get("SPARK_HOME") else None)
    path = Path(folder, "spark-defaults.conf") if folder else None
    if path is None or not path.is_file():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")):
            key, *value = re.split(r"\s*[=:\s]\s*", line, maxsplit=1)
            out[key] = value[0] if value else ""
    return out


def with_driver_gc(conf: dict[str, str], defaults: dict[str, str]) -> dict[str, str]:
    """``conf`` (the pipeline's ``spark.conf``) with the throughput collector in the driver's
    options, unless the pipeline or ``defaults`` (``spark-defaults.conf``) chooses one already."""
    current = conf.get(OPTION, defaults.get(OPTION, ""))
    if CHOOSES_GC.search(current):
        return dict(conf)
    return {**conf, OPTION: f"{current} {THROUGHPUT_GC}".strip()}
