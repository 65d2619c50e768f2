"""A long-running Spark Connect server on 127.0.0.1 (default port 15002), from the pip ``pyspark``.

``pyspark`` 4.3.0 bundles the server (``jars/spark-connect_2.13-4.3.0.jar``); its
``sbin/start-connect-server.sh`` daemonizes through ``spark-daemon.sh``, so this runs what that
script runs, ``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer``, in
the foreground: the pid we record is the server's own JVM. The server is a Spark driver: its
``--master`` is ``local[*]`` by default or a standalone master (``spark_cluster``), Spark's Kafka
connector jars (``offsetbatch-stack fetch``) are on its classpath, and Python UDFs run with this
interpreter. gRPC and the driver bind to loopback; the driver's web UI is off.

Clients: ``SparkSession.builder.remote("sc://127.0.0.1:15002").getOrCreate()`` (needs the
``pyspark[connect]`` packages: grpcio, grpcio-status, googleapis-common-protos, pandas, pyarrow,
zstandard). The readiness check is exactly that, plus ``spark.range(1).count()``, run in a child
interpreter so the caller's process never holds a Connect session it did not ask for.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from offsetbatch.paths import local_dir
from offsetbatch_dev.stack.processes import (
    HOST,
    StackProcessError,
    launch,
    port_open,
    read_pid,
    require_free,
    stop_pid,
    tail,
)
from offsetbatch_dev.stack.spark_cluster import daemon_env, spark_home

log = logging.getLogger(__name__)

DEFAULT_PORT = 15002
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
PROBE = (
    "import sys\n"
    "from pyspark.sql import SparkSession\n"
    "spark = SparkSession.builder.remote(sys.argv[1]).create()\n"
    "n = spark.range(1).count()\n"
    "spark.stop()\n"
    "sys.exit(0 if n == 1 else 3)\n"
)

# The warm-up a started server runs once, in a child interpreter as the probe: a batch job's shape
# (JSON parsed, a SQL transform, Parquet written partitioned and read back; with a broker, Spark's
# Kafka source asked for a pattern no topic matches, so its classes load and it meets the broker;
# a broker it cannot reach without credentials is skipped), so the first pipeline run does not pay
# the server's class loading and JIT (make demo's first DAG run: 12.6 s cold, 4.5 s after the
# warm-up, 3.1 s warm). Argument 1: the URL, 2: a scratch folder, 3: a bootstrap or "".
WARM_UP = (
    "import sys\n"
    "from pyspark.sql import SparkSession, functions as F\n"
    "spark = SparkSession.builder.remote(sys.argv[1]).create()\n"
    "rows = spark.range(20000).select(F.to_json(F.struct(F.col('id').alias('event_id'), "
    "(F.col('id') % 7).cast('string').alias('kind'), F.current_timestamp().alias('event_time'))).alias('value'), "
    "(F.col('id') % 4).cast('int').alias('kafka_partition'), F.col('id').alias('kafka_offset'))\n"
    "rows.select(F.from_json('value', 'event_id BIGINT, kind STRING, event_time TIMESTAMP').alias('v'), "
    "'kafka_partition', 'kafka_offset').select('v.*', 'kafka_partition', 'kafka_offset')"
    ".createOrReplaceTempView('records')\n"
    "spark.sql('SELECT * FROM records WHERE event_id IS NOT NULL').write.mode('overwrite')"
    ".partitionBy('kind').parquet(sys.argv[2])\n"
    "assert spark.read.parquet(sys.argv[2]).count() == 20000\n"
    "if sys.argv[3]:\n"
    "    try:\n"
    "        spark.read.format('kafka').option('kafka.bootstrap.servers', sys.argv[3])"
    ".option('subscribePattern', '__offsetbatch_warm_up_matches_no_topic')"
    # a broker that does not answer fails the read in seconds, not after the admin client's minutes
    ".option('kafka.default.api.timeout.ms', '5000').option('kafka.request.timeout.ms', '5000')"
    ".option('fetchOffset.numRetries', '1').load().count()\n"
    "    except Exception as exc:\n"  # a broker that wants credentials: the warm-up skips Kafka, says so
    "        print(f'warm-up: Kafka source not warmed ({type(exc).__name__})', file=sys.stderr)\n"
    # pyspark releases each query's results on the server from a thread pool, after the call: the
    # last ones arrive after stop() closed the session, and the server logs two harmless ERROR lines
    # "INVALID_HANDLE.SESSION_CLOSED" for the warm-up (waiting on that pool first did not stop them).
    "spark.stop()\n"
)


class SparkConnectError(StackProcessError):
    """The Spark Connect server could not be started, reached or stopped."""


@dataclass
class SparkConnectServer:
    """One Connect server; ``home`` holds its log, pid file, scratch space and warehouse."""

    port: int = DEFAULT_PORT
    master: str = "local[*]"
    home: Path | None = None
    jars: list[str] | None = None
    driver_memory: str = "1g"
    conf: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.home = Path(self.home or local_dir() / "spark-connect")

    @property
    def url(self) -> str:
        """The ``sc://`` URL clients pass to ``SparkSession.builder.remote``."""
        return f"sc://{HOST}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.home / "connect-server.log"

    @property
    def pid_file(self) -> Path:
        return self.home / "connect-server.pid"

    @property
    def info_file(self) -> Path:
        return self.home / "connect-server.json"

    def pid(self) -> int | None:
        return read_pid(self.pid_file)

    def running_master(self) -> str | None:
        """The ``--master`` the running server was started with (it may differ from ``master``)."""
        pid = self.pid()
        try:
            info = json.loads(self.info_file.read_text())
        except (OSError, ValueError):
            return None
        return info.get("master") if pid and info.get("pid") == pid else None

    def _jars(self) -> list[str]:
        if self.jars is not None:
            return self.jars
        from offsetbatch.dag.spark_jars import spark_connector_jars
        from offsetbatch.errors import ArtifactError

        try:
            return spark_connector_jars()
        except ArtifactError as exc:
            raise SparkConnectError(str(exc)) from None

    def command(self) -> list[str]:
        """The ``spark-submit`` line (no secrets: none are passed)."""
        settings = {
            "spark.connect.grpc.binding.address": HOST,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": HOST,
            "spark.driver.bindAddress": HOST,
            "spark.ui.enabled": "false",
            "spark.pyspark.python": sys.executable,
            "spark.local.dir": str(self.home / "tmp"),
            "spark.sql.warehouse.dir": str(self.home / "warehouse"),
            **self.conf,
        }
        cmd = [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--name", "Spark Connect server",
               "--master", self.master, "--driver-memory", self.driver_memory]
        jars = self._jars()
        if jars:
            cmd += ["--jars", ",".join(jars)]
        for key, value in settings.items():
            cmd += ["--conf", f"{key}={value}"]
        return cmd

    def start(self, timeout: float = 180.0, warm: bool = True, kafka_bootstrap: str | None = None,
              warm_timeout: float = 180.0) -> float:
        """Start (or find running) and wait until a Connect client runs a query; returns seconds.
        ``warm``: a server this call started then runs ``WARM_UP`` (with ``kafka_bootstrap``, Spark's
        Kafka source too) before it is handed over, within ``warm_timeout`` of its own: on a loaded
        2-core host a server on a cluster took 77 s to answer and its warm-up over 43 s more (CI,
        2026-11-30), so one budget of 120 s shared by both failed a server that was working. A server
        that exits fails at once, whatever the budgets."""
        t0 = time.monotonic()
        proc = None
        if not self.pid():
            require_free((self.port,), f"the Spark Connect server of {self.home}",
                         "--port of 'offsetbatch-stack spark-connect start'", SparkConnectError)
            (self.home / "tmp").mkdir(parents=True, exist_ok=True)
            proc = launch(self.command(), self.log_file, self.pid_file,
                          env=daemon_env(PYSPARK_PYTHON=sys.executable), cwd=self.home)
            self.info_file.write_text(json.dumps({"url": self.url, "master": self.master, "pid": proc.pid}) + "\n")
        self.wait_ready(max(1.0, timeout - (time.monotonic() - t0)), proc)
        ready = time.monotonic() - t0
        if proc is not None and warm:
            self.warm_up(warm_timeout, kafka_bootstrap)
        took = time.monotonic() - t0
        if proc is not None:
            log.info("spark connect server ready on %s (master %s, pid %d) in %.1fs%s", self.url, self.master, proc.pid,
                     took, f", warmed up in {took - ready:.1f}s" if warm else "")
        return took

    def warm_up(self, timeout: float = 180.0, kafka_bootstrap: str | None = None) -> None:
        """Run ``WARM_UP`` on the server; a failure names the server's log (a server that answers
        the probe but cannot run a job would fail the first pipeline run anyway)."""
        scratch = self.home / "tmp" / "warm-up"
        try:
            res = subprocess.run([sys.executable, "-c", WARM_UP, self.url, str(scratch), kafka_bootstrap or ""],
                                 capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SparkConnectError(f"the Spark Connect server on {self.url} did not finish its warm-up job in "
                                    f"{timeout:.0f}s; see {self.log_file}:\n{tail(self.log_file)}") from None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if res.returncode != 0:
            lines = (res.stderr or res.stdout).strip().splitlines()
            raise SparkConnectError(f"the Spark Connect server on {self.url} answers but failed its warm-up job "
                                    f"({lines[-1] if lines else res.returncode}); see {self.log_file}:\n"
                                    f"{tail(self.log_file)}")
        for line in res.stderr.splitlines():  # what the warm-up skipped (Kafka), said, not dropped
            if line.startswith("warm-up:"):
                log.warning("spark connect server on %s: %s", self.url, line)

    def wait_ready(self, timeout: float, proc: subprocess.Popen | None = None) -> None:
        """Until the gRPC port accepts connections and ``spark.range(1).count()`` answers 1."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise SparkConnectError(f"the Spark Connect server exited with code {proc.returncode}; "
                                        f"see {self.log_file}:\n{tail(self.log_file)}")
            if port_open(self.port):
                try:
                    res = subprocess.run([sys.executable, "-c", PROBE, self.url], capture_output=True, text=True,
                                         timeout=max(5.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    break
                if res.returncode == 0:
                    return
                lines = (res.stderr or res.stdout).strip().splitlines()
                last = lines[-1] if lines else f"probe exit code {res.returncode}"
            time.sleep(0.5)
        raise SparkConnectError(f"Spark Connect server on {self.url} not ready after {timeout:.0f}s ({last}); "
                                f"see {self.log_file}:\n{tail(self.log_file)}")

    def stop(self, timeout: float = 30.0, hard: bool = False) -> None:
        """Stop by pid: SIGTERM, or SIGKILL with ``hard``; its Python workers go with it."""
        pid = self.pid()
        if pid is None:
            return
        stop_pid(pid, timeout, hard, ports=(self.port,))
        self.pid_file.unlink(missing_ok=True)
        log.info("spark connect server on %s stopped", self.url)

    def wipe(self) -> None:
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)
