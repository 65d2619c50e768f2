"""A Spark standalone cluster on 127.0.0.1: one master and N workers, from the pip ``pyspark``.

``pyspark`` 4.3.0 from PyPI ships no ``start-master.sh``/``start-worker.sh``, but its jars hold the
daemons: ``bin/spark-class org.apache.spark.deploy.master.Master`` and ``...worker.Worker``, run
here in the foreground (so the pid we record is the daemon's JVM; ``spark-class`` execs it), each
in a session of its own so a worker and the executors it forks stop together.

Everything binds to loopback (``SPARK_LOCAL_IP``, ``--host``; the web UIs follow
``SPARK_LOCAL_IP``); the master's REST submission server is off (Python applications are
submitted in client mode anyway) and no daemon falls back to the next port when its own is
taken (``spark.port.maxRetries=0``): a busy port is a clear error, checked before starting.

Executors run Python with this interpreter's environment, as the driver does: a PySpark driver
names its executors' Python itself (``spark.pyspark.python``, else its ``PYSPARK_PYTHON``, else
``python3``; ``scripts/env.sh`` sets the venv's), so the workers get ``PYSPARK_PYTHON`` =
``sys.executable`` and this interpreter's folder first on ``PATH``: a driver that names nothing
gets the venv's ``python3`` too, never the system's.

State under ``<OFFSETBATCH_HOME>/spark``: ``master/`` (log, pid) and ``worker-<i>/`` (log, pid,
``work/`` with each application's executor logs, ``tmp/`` for shuffle and spills).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offsetbatch.paths import local_dir
from offsetbatch_dev.stack.processes import (
    HOST,
    StackProcessError,
    launch,
    read_pid,
    require_free,
    stop_pid,
    tail,
    wait_for,
)

log = logging.getLogger(__name__)

DEFAULT_MASTER_PORT = 7077
DEFAULT_UI_PORT = 8180  # not Spark's 8080: that is the Airflow API server's
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


class SparkClusterError(StackProcessError):
    """The Spark master or a worker could not be started, reached or stopped."""


def spark_home() -> Path:
    """The pip ``pyspark`` package folder, which is a Spark distribution's home (bin/, jars/)."""
    import pyspark

    return Path(pyspark.__file__).parent


def daemon_env(**extra: str) -> dict[str, str]:
    """Environment for a Spark daemon or submission bound to loopback."""
    env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": HOST, "SPARK_PUBLIC_DNS": HOST}
    env.pop("SPARK_CONF_DIR", None)  # a stray spark-defaults.conf must not change what we start
    env.update(extra)
    return env


@dataclass
class SparkWorker:
    """One worker daemon: ``index`` (1-based) names its folder and its web UI port."""

    index: int
    home: Path
    ui_port: int
    cores: int
    memory: str
    master_url: str
    daemon_memory: str = "512m"

    @property
    def log_file(self) -> Path:
        return self.home / "worker.log"

    @property
    def pid_file(self) -> Path:
        return self.home / "worker.pid"

    @property
    def work_dir(self) -> Path:
        return self.home / "work"

    @property
    def ui_url(self) -> str:
        return f"http://{HOST}:{self.ui_port}"

    def pid(self) -> int | None:
        return read_pid(self.pid_file)

    def launch(self) -> subprocess.Popen | None:
        """Start the worker's JVM without waiting (``None`` if it runs already)."""
        if self.pid():
            return None
        require_free((self.ui_port,), f"Spark worker {self.index} of {self.home.parent}",
                     "--ui-port of 'offsetbatch-stack spark start', or SPARK_MASTER_WEBUI_PORT=...", SparkClusterError)
        for d in (self.work_dir, self.home / "tmp"):
            d.mkdir(parents=True, exist_ok=True)
        env = daemon_env(
            PYSPARK_PYTHON=sys.executable,
            PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", os.defpath)]),
            SPARK_DAEMON_MEMORY=self.daemon_memory,
            SPARK_LOCAL_DIRS=str(self.home / "tmp"),
            SPARK_WORKER_OPTS="-Dspark.port.maxRetries=0",
        )
        cmd = [str(spark_home() / "bin" / "spark-class"), WORKER_CLASS, "--host", HOST,
               "--cores", str(self.cores), "--memory", self.memory, "--webui-port", str(self.ui_port),
               "--work-dir", str(self.work_dir), self.master_url]
        return launch(cmd, self.log_file, self.pid_file, env=env, cwd=self.home)

    def stop(self, timeout: float = 30.0, hard: bool = False, with_executors: bool = True) -> None:
        """SIGTERM (the worker kills its executors) or, with ``hard``, SIGKILL: a crashed worker.
        ``with_executors`` (default) also kills what it forked, as a lost machine would; without
        it, orphaned executors notice their worker is gone and exit on their own."""
        pid = self.pid()
        if pid is None:
            return
        stop_pid(pid, timeout, hard, ports=(self.ui_port,), group=with_executors or not hard)
        self.pid_file.unlink(missing_ok=True)
        log.info("spark worker %d (pid %d) %s", self.index, pid, "killed" if hard else "stopped")


@dataclass
class SparkCluster:
    """A master on ``127.0.0.1:port`` (web UI on ``ui_port``) and ``workers`` workers of ``cores``
    cores and ``memory`` each (web UIs on ``ui_port + i``)."""

    port: int = DEFAULT_MASTER_PORT
    ui_port: int = DEFAULT_UI_PORT
    workers: int = 1
    cores: int = 2
    memory: str = "2g"
    home: Path | None = None
    daemon_memory: str = "512m"

    def __post_init__(self) -> None:
        self.home = Path(self.home or local_dir() / "spark")
        if self.workers < 1 or self.cores < 1:
            raise SparkClusterError(f"a cluster needs at least one worker with one core (got --workers {self.workers} "
                                    f"--cores {self.cores})")
        self.worker_nodes = [
            SparkWorker(i, self.home / f"worker-{i}", self.ui_port + i, self.cores, self.memory, self.master_url,
                        self.daemon_memory)
            for i in range(1, self.workers + 1)
        ]

    @property
    def master_url(self) -> str:
        """What ``spark-submit --master`` and Airflow's Spark connection (host ``spark://127.0.0.1``,
        port ``port``) take."""
        return f"spark://{HOST}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{HOST}:{self.ui_port}"

    def airflow_connection(self) -> dict[str, Any]:
        """The Airflow Spark connection for this master (``AIRFLOW_CONN_SPARK_DEFAULT`` as JSON):
        client deploy mode, the only one standalone offers Python applications."""
        return {"conn_type": "spark", "host": f"spark://{HOST}", "port": self.port, "extra": {"deploy-mode": "client"}}

    @property
    def master_dir(self) -> Path:
        return self.home / "master"

    @property
    def master_log(self) -> Path:
        return self.master_dir / "master.log"

    @property
    def master_pid_file(self) -> Path:
        return self.master_dir / "master.pid"

    def master_pid(self) -> int | None:
        return read_pid(self.master_pid_file)

    def worker(self, index: int = 1) -> SparkWorker:
        if not 1 <= index <= len(self.worker_nodes):
            raise SparkClusterError(f"no worker {index}: this cluster has workers 1..{len(self.worker_nodes)}")
        return self.worker_nodes[index - 1]

    def worker_pids(self) -> list[int | None]:
        """Each worker's pid in order (``None`` for one that is down)."""
        return [w.pid() for w in self.worker_nodes]

    def _launch_master(self) -> subprocess.Popen | None:
        if self.master_pid():
            return None
        require_free((self.port, self.ui_port), f"the Spark master of {self.home}",
                     "--port/--ui-port of 'offsetbatch-stack spark start', or SPARK_MASTER_PORT=... "
                     "SPARK_MASTER_WEBUI_PORT=...", SparkClusterError)
        self.master_dir.mkdir(parents=True, exist_ok=True)
        env = daemon_env(
            SPARK_DAEMON_MEMORY=self.daemon_memory,
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false -Dspark.port.maxRetries=0",
        )
        cmd = [str(spark_home() / "bin" / "spark-class"), MASTER_CLASS, "--host", HOST,
               "--port", str(self.port), "--webui-port", str(self.ui_port)]
        return launch(cmd, self.master_log, self.master_pid_file, env=env, cwd=self.master_dir)

    def start(self, timeout: float = 90.0) -> float:
        """Start the master and every worker that is down; wait until the master's JSON lists
        every worker ALIVE. Harmless when all run (it also brings back a killed worker)."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        master = self._launch_master()
        wait_for(lambda: (self.master_state() or {}).get("status") == "ALIVE", timeout, master,
                 f"Spark master on {self.master_url}", self.master_log, error=SparkClusterError)
        launched = [(w, w.launch()) for w in self.worker_nodes]
        for w, proc in launched:
            wait_for(lambda w=w: self._alive_in_master(w), max(1.0, deadline - time.monotonic()), proc,
                     f"Spark worker {w.index} (registered ALIVE with {self.master_url})", w.log_file,
                     error=SparkClusterError)
        took = time.monotonic() - t0
        if master or any(p for _, p in launched):
            log.info("spark cluster ready: %s with %d worker(s) x %d cores, UI %s, in %.1fs",
                     self.master_url, self.workers, self.cores, self.ui_url, took)
        return took

    def master_state(self) -> dict[str, Any] | None:
        """The master's own view (``/json/`` of its web UI: workers, cores, applications), or
        ``None`` when it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=3) as resp:
                return json.load(resp)
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def _alive_in_master(self, worker: SparkWorker, state: dict[str, Any] | None = None) -> bool:
        state = state if state is not None else self.master_state()
        return any(w.get("state") == "ALIVE" and w.get("webuiaddress") == worker.ui_url
                   for w in (state or {}).get("workers", []))

    def status(self) -> dict[str, Any]:
        """What the master reports, as tests and ``offsetbatch-stack spark status`` use it:
        ``alive_workers`` and ``cores`` (of ALIVE workers), ``cores_used``, per worker its pid
        and whether the master has it ALIVE, and the running and finished applications."""
        state = self.master_state()
        workers = [{"index": w.index, "pid": w.pid(), "ui": w.ui_url, "alive": self._alive_in_master(w, state or {})}
                   for w in self.worker_nodes]
        if state is None:
            return {"master_url": self.master_url, "master_pid": self.master_pid(), "running": False,
                    "alive_workers": 0, "cores": 0, "cores_used": 0, "workers": workers,
                    "active_apps": [], "completed_apps": []}
        return {
            "master_url": self.master_url, "master_pid": self.master_pid(), "running": True,
            "alive_workers": state.get("aliveworkers", 0), "cores": state.get("cores", 0),
            "cores_used": state.get("coresused", 0), "workers": workers,
            "active_apps": state.get("activeapps", []), "completed_apps": state.get("completedapps", []),
        }

    def kill_worker(self, index: int = 1, hard: bool = True, with_executors: bool = True) -> int | None:
        """Crash worker ``index`` (``kill -9`` by default, its executors too); returns its pid.
        ``start()`` brings it back."""
        w = self.worker(index)
        pid = w.pid()
        w.stop(hard=hard, with_executors=with_executors)
        return pid

    def stop(self, timeout: float = 30.0, hard: bool = False) -> None:
        """Stop the workers (all signalled at once), then the master; by pid."""
        running = [(w, w.pid()) for w in self.worker_nodes]
        for _, pid in running:
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL if hard else signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for w, pid in running:
            if pid:
                stop_pid(pid, timeout, hard, ports=(w.ui_port,))
            w.pid_file.unlink(missing_ok=True)
        pid = self.master_pid()
        if pid:
            stop_pid(pid, timeout, hard, ports=(self.port, self.ui_port))
        self.master_pid_file.unlink(missing_ok=True)
        if pid or any(p for _, p in running):
            log.info("spark cluster %s stopped", self.master_url)

    def wipe(self) -> None:
        """Stop, then delete logs, executor work dirs and scratch space."""
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)

    def master_log_tail(self, lines: int = 30) -> str:
        return tail(self.master_log, lines)
