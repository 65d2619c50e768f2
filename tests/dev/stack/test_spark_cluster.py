"""The local Spark standalone cluster (``offsetbatch-stack spark``) and Spark Connect server
(``offsetbatch-stack spark-connect``): real daemons from the pip pyspark, on loopback only."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from harness import worker_port

from offsetbatch_dev.stack.processes import group_members, port_open
from offsetbatch_dev.stack.spark_cluster import SparkCluster, SparkClusterError
from offsetbatch_dev.stack.spark_connect import SparkConnectError, SparkConnectServer

pytestmark = pytest.mark.integration

MASTER_PORT, UI_PORT, CONNECT_PORT = worker_port(17077), worker_port(17180), worker_port(17002)

# A driver of its own (this process may hold the suite's local[2] session): reports the master
# it ran on and the Python environment its executors ran.
APP = """
import json, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master(sys.argv[1]).appName("cluster-probe")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.ui.enabled", "false").config("spark.executor.memory", "512m").getOrCreate())
sc = spark.sparkContext
pythons = sc.parallelize(range(4), 4).map(lambda _: __import__("sys").prefix).distinct().collect()
executors = sc._jsc.sc().getExecutorMemoryStatus().size()  # block managers: the driver's and executors'
print(json.dumps({"master": sc.master, "pythons": pythons, "executors": executors}))
spark.stop()
"""


def listening(pid: int) -> set[str]:
    """``ip:port`` of every TCP socket ``pid`` listens on (IPv4 and IPv4-mapped IPv6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] != "0A" or cols[9] not in inodes:  # 0A = LISTEN
                continue
            addr, port = cols[1].split(":")
            raw = bytes.fromhex(addr)
            if len(raw) == 16:  # IPv6: four little-endian words; keep the IPv4 of ::ffff:a.b.c.d
                words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
                raw = words[3] if words[2] == b"\x00\x00\xff\xff" and not any(words[0] + words[1]) else b"v6"
            else:
                raw = raw[::-1]
            ip = ".".join(str(b) for b in raw) if len(raw) == 4 else "non-loopback-v6"
            found.add(f"{ip}:{int(port, 16)}")
    return found


@pytest.fixture(scope="module")
def cluster(test_state):
    c = SparkCluster(port=MASTER_PORT, ui_port=UI_PORT, workers=1, cores=2, memory="1g",
                     home=test_state / "spark-cluster")
    c.wipe()
    c.start()
    yield c
    c.stop()


def test_master_and_worker_report_one_alive_worker_with_two_cores(cluster):
    st = cluster.status()
    assert (st["running"], st["alive_workers"], st["cores"]) == (True, 1, 2)
    assert cluster.master_url == f"spark://127.0.0.1:{MASTER_PORT}"
    assert cluster.master_state()["url"] == cluster.master_url
    for pid in (cluster.master_pid(), *cluster.worker_pids()):
        addresses = listening(pid)
        assert addresses and all(a.startswith("127.0.0.1:") for a in addresses), addresses
    assert f"127.0.0.1:{MASTER_PORT}" in listening(cluster.master_pid())
    assert f"127.0.0.1:{UI_PORT}" in listening(cluster.master_pid())
    assert f"127.0.0.1:{UI_PORT + 1}" in listening(cluster.worker_pids()[0])


def test_start_twice_is_harmless(cluster):
    pids = (cluster.master_pid(), cluster.worker_pids())
    assert cluster.start() < 5
    assert (cluster.master_pid(), cluster.worker_pids()) == pids


def test_an_application_runs_on_the_workers_executors_with_the_drivers_python(cluster):
    res = subprocess.run([sys.executable, "-c", APP, cluster.master_url], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["master"] == cluster.master_url
    assert out["pythons"] == [sys.prefix]  # the driver's environment (this venv), not the system Python
    assert out["executors"] >= 2  # the driver's block manager and at least one executor
    apps = cluster.status()["completed_apps"]
    assert any(a["name"] == "cluster-probe" and a["cores"] == 2 for a in apps), apps


def test_a_killed_worker_takes_its_executors_and_start_brings_it_back(cluster):
    pid = cluster.kill_worker(1)  # kill -9
    assert pid and cluster.worker_pids() == [None]
    assert group_members(pid) == []
    cluster.start()
    assert cluster.status()["alive_workers"] == 1
    assert cluster.worker_pids()[0] not in (None, pid)


def test_connect_server_runs_queries_on_the_cluster(cluster, test_state):
    server = SparkConnectServer(port=CONNECT_PORT, master=cluster.master_url, home=test_state / "spark-connect",
                                driver_memory="512m", conf={"spark.executor.memory": "512m"})
    server.wipe()
    try:
        server.start()
        assert server.running_master() == cluster.master_url
        assert listening(server.pid()) >= {f"127.0.0.1:{CONNECT_PORT}"}
        assert all(a.startswith("127.0.0.1:") for a in listening(server.pid()))
        assert any(a["name"] == "Spark Connect server" for a in cluster.status()["active_apps"])
        pid = server.pid()
        assert server.start() < 30 and server.pid() == pid  # already running: probed, not restarted
    finally:
        server.stop()
    assert server.pid() is None and not port_open(CONNECT_PORT)


@pytest.mark.parametrize("which", ["master", "ui", "connect"])
def test_a_port_in_use_is_a_clear_error(test_state, which):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        if which == "connect":
            server = SparkConnectServer(port=port, home=test_state / "spark-connect-clash", jars=[])
            with pytest.raises(SparkConnectError, match=rf"port 127.0.0.1:{port} is already in use .*--port"):
                server.start()
            return
        free = worker_port(17300)
        kwargs = {"port": port, "ui_port": free} if which == "master" else {"port": free, "ui_port": port}
        c = SparkCluster(**kwargs, home=test_state / "spark-clash")
        with pytest.raises(SparkClusterError, match=rf"port 127.0.0.1:{port} is already in use by another process, "
                                                    r"not by the Spark master .*SPARK_MASTER"):
            c.start()
        assert c.master_pid() is None


def test_stop_leaves_no_process_and_no_port(cluster):
    """Last: stops the module's cluster. Stop is by pid, the workers (and their process groups)
    first, and returns once the ports are closed."""
    pids = [cluster.master_pid(), *cluster.worker_pids()]
    assert all(pids)
    cluster.stop()
    assert all(group_members(pid) == [] for pid in pids)
    assert cluster.master_pid() is None and cluster.worker_pids() == [None]
    assert not any(port_open(p) for p in (MASTER_PORT, UI_PORT, UI_PORT + 1))
    assert cluster.status()["running"] is False
    cluster.stop()  # stopping a stopped cluster is harmless
