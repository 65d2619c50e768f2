"""Layout of the local servers without starting any: ports, loopback bindings, the commands run; and
the files the development tooling (scripts/dev) finds in the checkout."""

from __future__ import annotations

import ast
import socket
import sys

import pytest

from offsetbatch_dev import PROJECT_ROOT
from offsetbatch_dev.bench import throughput
from offsetbatch_dev.stack import artifacts
from offsetbatch_dev.stack.kafka_broker import KafkaBroker, Quorum
from offsetbatch_dev.stack.kafka_cluster import KafkaCluster
from offsetbatch_dev.stack.processes import StackProcessError, require_free
from offsetbatch_dev.stack.spark_cluster import SparkCluster
from offsetbatch_dev.stack.spark_connect import SparkConnectServer


def test_cluster_nodes_ports_and_quorum(tmp_path):
    c = KafkaCluster(port=9092, home=tmp_path)
    assert [(n.node_id, n.port, n.controller_port) for n in c.nodes] == [(1, 9092, 9095), (2, 9093, 9096), (3, 9094, 9097)]
    assert c.bootstrap == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    assert {n.home for n in c.nodes} == {tmp_path / f"node-{i}" for i in (1, 2, 3)}
    q = c.quorum
    assert q.bootstrap_servers == "127.0.0.1:9095,127.0.0.1:9096,127.0.0.1:9097"
    ids = [v[2] for v in q.voters]
    assert q.initial_controllers == f"1@127.0.0.1:9095:{ids[0]},2@127.0.0.1:9096:{ids[1]},3@127.0.0.1:9097:{ids[2]}"
    props = q.properties(2)
    assert props["node.id"] == "2"
    assert (props["default.replication.factor"], props["min.insync.replicas"]) == ("3", "2")
    assert (props["offsets.topic.replication.factor"], props["transaction.state.log.min.isr"]) == ("3", "2")
    assert c.node(3) is c.nodes[2]
    assert c.connection_extra() == {"bootstrap.servers": c.bootstrap} and c.client_kwargs() == {}


def test_the_single_broker_keeps_its_static_voter():
    b = KafkaBroker(port=19999)
    assert (b.node_id, b.controller_port, b.quorum, b.bootstrap) == (1, 20000, None, "127.0.0.1:19999")


def test_a_cluster_node_cannot_be_secured_yet(tmp_path):
    q = Quorum(cluster_id="x", voters=((1, 2, "d"),))
    with pytest.raises(StackProcessError, match="PLAINTEXT only"):
        KafkaBroker(port=1, home=tmp_path, security="sasl_ssl", node_id=1, quorum=q)


def test_spark_cluster_ports(tmp_path):
    c = SparkCluster(port=17077, ui_port=17180, workers=2, home=tmp_path)
    assert c.master_url == "spark://127.0.0.1:17077"
    assert [w.ui_port for w in c.worker_nodes] == [17181, 17182]
    assert [w.home for w in c.worker_nodes] == [tmp_path / "worker-1", tmp_path / "worker-2"]
    assert c.airflow_connection() == {"conn_type": "spark", "host": "spark://127.0.0.1", "port": 17077,
                                      "extra": {"deploy-mode": "client"}}


def test_connect_server_binds_loopback_and_runs_this_python(tmp_path):
    s = SparkConnectServer(port=15555, master="spark://127.0.0.1:7077", home=tmp_path, jars=["/j/a.jar", "/j/b.jar"])
    cmd = s.command()
    conf = {cmd[i + 1].split("=", 1)[0]: cmd[i + 1].split("=", 1)[1] for i, a in enumerate(cmd) if a == "--conf"}
    assert cmd[cmd.index("--class") + 1] == "org.apache.spark.sql.connect.service.SparkConnectServer"
    assert cmd[cmd.index("--master") + 1] == "spark://127.0.0.1:7077"
    assert cmd[cmd.index("--jars") + 1] == "/j/a.jar,/j/b.jar"
    assert conf["spark.connect.grpc.binding.address"] == "127.0.0.1"
    assert conf["spark.connect.grpc.binding.port"] == "15555"
    assert conf["spark.driver.bindAddress"] == conf["spark.driver.host"] == "127.0.0.1"
    assert conf["spark.pyspark.python"] == sys.executable
    assert s.url == "sc://127.0.0.1:15555"


def test_a_busy_port_names_the_port_and_the_way_out():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(StackProcessError, match=rf"port 127.0.0.1:{port} is already in use by another process, "
                                                    r"not by the thing\. Stop that process or choose another port "
                                                    r"\(--port\)\."):
            require_free((port,), "the thing", "--port")


def test_the_dev_tooling_finds_the_checkouts_files_from_scripts_dev():
    """offsetbatch_dev moved out of include/ but still reads the checkout (offsetbatch_dev.PROJECT_ROOT):
    the Maven poms, the runtime's job entry, and its own Spark applications, all submitted by path."""
    assert {p.name for p in artifacts.MAVEN_DIR.iterdir()} >= {
        "settings.xml", "kafka-broker.pom.xml", "spark-kafka-connector.pom.xml"}
    assert artifacts.MAVEN_DIR == PROJECT_ROOT / "scripts" / "maven" and artifacts.KAFKA_VERSION[0].isdigit()
    assert throughput.JOB == PROJECT_ROOT / "jobs" / "offsetbatch_job.py" and throughput.JOB.is_file()
    assert throughput.RAW_READ_APP == PROJECT_ROOT / "scripts/dev/offsetbatch_dev/bench/raw_read_app.py"
    assert throughput.RAW_READ_APP.is_file()
    for kind in ("structured_streaming", "batch_read", "structured_streaming_avro"):
        peer = throughput.PEERS / f"{kind}.py"
        imported = {(n.module if isinstance(n, ast.ImportFrom) else a.name).split(".")[0]
                    for n in ast.walk(ast.parse(peer.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom))
                    for a in n.names}
        assert not imported & {"offsetbatch", "offsetbatch_dev"}, f"{peer}: the peers run on pyspark alone"
    assert (PROJECT_ROOT / "docs").is_dir(), "the benchmarks write their reports to docs/"


def test_runuser_is_found_off_path_or_named_with_its_package(monkeypatch):
    """As root the stack starts PostgreSQL through runuser, which /usr/sbin holds (not on every root
    PATH); missing, the error names the package and the way around it."""
    from offsetbatch_dev.stack import postgres

    monkeypatch.setenv("PATH", "/nonexistent")
    assert postgres._runuser() in ("/usr/sbin/runuser", "/sbin/runuser")
    monkeypatch.setattr(postgres.os, "access", lambda path, mode: False)
    with pytest.raises(postgres.PostgresError, match=r"through 'runuser' \(util-linux\), which is not on PATH nor in "
                                                     r"/usr/sbin: install it with 'apt-get install util-linux'"):
        postgres._runuser()
