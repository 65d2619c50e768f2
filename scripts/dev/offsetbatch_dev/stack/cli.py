"""``offsetbatch-stack``: fetch artifacts; start/stop the local Kafka, PostgreSQL and Spark servers.

    offsetbatch-stack fetch                      resolve broker, Spark connector, S3A and S3Proxy jars (once)
    offsetbatch-stack kafka start|stop|status|wipe [--port 9092] [--secure [--acl]] [--brokers 3]
    offsetbatch-stack postgres start|stop|status|wipe [--port 54329]
    offsetbatch-stack spark start|stop|status|wipe [--workers 1] [--cores 2] [--memory 2g] [--port 7077] [--ui-port 8180]
    offsetbatch-stack spark-connect start|stop|status|wipe [--port 15002] [--master local[*]] [--jars a.jar,b.jar]
                                                 the server pipelines run their job on (spark.runner: connect)
    offsetbatch-stack s3 start|stop|status [--port 19500] [--bucket NAME ...] [--backend transient|filesystem]

Every server binds 127.0.0.1 only, keeps its state under OFFSETBATCH_HOME (default .local/), and
is stopped by the pid it recorded; starting a running one is harmless.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from offsetbatch_dev.stack import artifacts
from offsetbatch_dev.stack.kafka_broker import KafkaBroker
from offsetbatch_dev.stack.kafka_cluster import KafkaCluster
from offsetbatch_dev.stack.kafka_security import ADMIN, PIPELINE
from offsetbatch_dev.stack.postgres import PostgresCluster, PostgresError
from offsetbatch_dev.stack.processes import StackProcessError
from offsetbatch_dev.stack.s3_server import DEFAULT_PORT as S3_PORT
from offsetbatch_dev.stack.s3_server import S3Server
from offsetbatch_dev.stack.spark_cluster import DEFAULT_MASTER_PORT, DEFAULT_UI_PORT, SparkCluster
from offsetbatch_dev.stack.spark_connect import DEFAULT_PORT as CONNECT_PORT
from offsetbatch_dev.stack.spark_connect import SparkConnectServer


def _print_secure_paths(broker: KafkaBroker) -> None:
    """Where clients find the trust anchor and credentials: paths only, never the secrets."""
    print(f"  CA certificate (ssl.ca.location): {broker.ca_file}")
    print(f"  {PIPELINE} user's Kafka connection extra (owner-only JSON): {broker.credentials_file(PIPELINE)}")
    print(f"  {ADMIN} user's Kafka connection extra (owner-only JSON): {broker.credentials_file(ADMIN)}")


def _s3(args: argparse.Namespace) -> int:
    server = S3Server(port=args.port, backend=args.backend, buckets=args.bucket)
    if args.action == "start":
        server.start()
        print(f"s3proxy ({server.backend}) ready on {server.endpoint}, pid {server.pid()}"
              + (f", buckets {', '.join(args.bucket)}" if args.bucket else ""))
        print(f"  Airflow connection (type aws, owner-only JSON): {server.connection_file}")
        print(f"  use it: export AIRFLOW_CONN_S3_DEFAULT=\"$(cat {server.connection_file})\"")
        return 0
    if args.action == "stop":
        server.stop()
        print(f"s3proxy on {server.endpoint} stopped")
        return 0
    pid = server.pid()
    print(f"s3proxy on {server.endpoint}: " + (f"running, pid {pid}" if pid else "stopped"))
    return 0 if pid else 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="offsetbatch-stack", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="service", required=True)
    sub.add_parser("fetch", help="resolve the Kafka broker, Spark connector, S3A and S3Proxy jars from Maven Central")
    for name, port_env, default in (("kafka", "KAFKA_PORT", 9092), ("postgres", "PG_PORT", 54329)):
        p = sub.add_parser(name, help=f"manage the local {name} server")
        p.add_argument("action", choices=["start", "stop", "status", "wipe"])
        p.add_argument("--port", type=int, default=int(os.environ.get(port_env, default)))
        if name == "kafka":
            p.add_argument("--secure", action="store_true",
                           help="start: SASL_SSL (SCRAM-SHA-512) with a local CA; users made when the data is first "
                                "formatted (a plaintext broker's data must be wiped first)")
            p.add_argument("--acl", action="store_true",
                           help="start: with --secure, enable the StandardAuthorizer (no ACL means denied)")
            p.add_argument("--brokers", type=int, default=int(os.environ.get("KAFKA_BROKERS", 1)),
                           help="1 (default): the single broker; 3 or more: a cluster of combined KRaft nodes in "
                                "$OFFSETBATCH_HOME/kafka-cluster, clients on --port..--port+N-1, controllers on the N "
                                "ports after them, replication factor 3, min.insync.replicas 2 (stop/status/wipe: "
                                "give the same --brokers and --port)")
    p = sub.add_parser("spark", help="manage a local Spark standalone cluster (master + workers)")
    p.add_argument("action", choices=["start", "stop", "status", "wipe"])
    p.add_argument("--workers", type=int, default=1, help="number of workers (default 1)")
    p.add_argument("--cores", type=int, default=2, help="cores each worker offers (default 2)")
    p.add_argument("--memory", default="2g", help="memory each worker offers to executors (default 2g)")
    p.add_argument("--port", type=int, default=int(os.environ.get("SPARK_MASTER_PORT", DEFAULT_MASTER_PORT)),
                   help="master port (SPARK_MASTER_PORT, default %(default)s)")
    p.add_argument("--ui-port", type=int, default=int(os.environ.get("SPARK_MASTER_WEBUI_PORT", DEFAULT_UI_PORT)),
                   help="master web UI port; worker i's UI is this + i (SPARK_MASTER_WEBUI_PORT, default %(default)s)")
    p = sub.add_parser("spark-connect", help="manage a local Spark Connect server")
    p.add_argument("action", choices=["start", "stop", "status", "wipe"])
    p.add_argument("--port", type=int, default=int(os.environ.get("SPARK_CONNECT_PORT", CONNECT_PORT)),
                   help="gRPC port (SPARK_CONNECT_PORT, default %(default)s)")
    p.add_argument("--master", default="local[*]",
                   help="the server's Spark master: local[*] (default) or spark://127.0.0.1:7077")
    p.add_argument("--jars", default="",
                   help="comma-separated jars added to Spark's Kafka connector jars on the server's classpath")
    p.add_argument("--driver-memory", default="1g", help="the server's (driver's) heap (default 1g)")
    p.add_argument("--kafka-bootstrap", default=None,
                   help="a broker the warm-up job's Kafka source meets (default: the stack's broker, when running)")
    p.add_argument("--no-warm-up", dest="warm", action="store_false",
                   help="hand the server over cold (its first job then pays the class loading: ~8 s here)")
    p = sub.add_parser("s3", help="manage a local S3 API server (S3Proxy)")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--port", type=int, default=int(os.environ.get("S3_PORT", S3_PORT)),
                   help="HTTP port on 127.0.0.1 (S3_PORT, default %(default)s)")
    p.add_argument("--bucket", action="append", default=[], help="start: create this bucket (repeatable)")
    p.add_argument("--backend", choices=["transient", "filesystem"], default="transient",
                   help="start: objects in memory (default, fast) or on disk under $OFFSETBATCH_HOME/s3/data")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    logging.getLogger("kafka").setLevel(logging.WARNING)
    try:
        if args.service == "fetch":
            print(f"kafka broker jars:    {artifacts.fetch_kafka()}")
            print(f"spark connector jars: {artifacts.fetch_spark_connector()}")
            print(f"spark s3a jars:       {artifacts.fetch_spark_s3a()}")
            print(f"s3proxy:              {artifacts.fetch_s3proxy()}")
        elif args.service == "s3":
            return _s3(args)
        elif args.service == "kafka" and args.brokers != 1:
            if args.secure or args.acl:
                parser.error("--brokers with --secure/--acl is not supported yet: a secured broker is a single "
                             "broker (leave out --brokers), the cluster runs PLAINTEXT on loopback")
            return _kafka_cluster(args)
        elif args.service == "kafka":
            if args.acl and not args.secure:
                parser.error("--acl needs --secure: ACLs are meaningless without authenticated clients")
            # stop/status/wipe act on whatever the home holds; only start chooses the mode.
            broker = KafkaBroker(port=args.port, security="sasl_ssl" if args.secure else "plaintext", acl=args.acl)
            if args.action != "start" and broker.formatted_security() == "sasl_ssl":
                broker = KafkaBroker(port=args.port, security="sasl_ssl")
            if args.action == "start":
                took = broker.start()
                mode = "SASL_SSL/SCRAM-SHA-512" + (", ACLs on" if broker.acl else "") if broker.secure else "PLAINTEXT"
                print(f"kafka {artifacts.KAFKA_VERSION} (KRaft, {mode}) ready on {broker.bootstrap}, pid {broker.pid()}, in {took:.1f}s; data in {broker.data_dir}")
                if broker.secure:
                    _print_secure_paths(broker)
            elif args.action == "stop":
                broker.stop()
                print(f"kafka on {broker.bootstrap} stopped")
            elif args.action == "wipe":
                broker.wipe()
                print(f"kafka data in {broker.home} wiped")
            else:
                pid = broker.pid()
                mode = {"sasl_ssl": ", SASL_SSL", "plaintext": ", PLAINTEXT", None: ""}[broker.formatted_security()]
                print(f"kafka on {broker.bootstrap}{mode}: " + (f"running, pid {pid}" if pid else "stopped"))
                if broker.secure:
                    _print_secure_paths(broker)
                return 0 if pid else 3
        elif args.service == "spark":
            return _spark(args)
        elif args.service == "spark-connect":
            return _spark_connect(args)
        else:
            cluster = PostgresCluster(port=args.port)
            if args.action == "start":
                cluster.start()
                print(f"postgresql ready: {cluster.url}")
            elif args.action == "stop":
                cluster.stop()
                print("postgresql stopped")
            elif args.action == "wipe":
                cluster.wipe()
                print(f"postgresql data in {cluster.home} wiped")
            else:
                running = (cluster.data_dir / "postmaster.pid").exists()
                print(f"postgresql on 127.0.0.1:{args.port}: " + ("running" if running else "stopped"))
                return 0 if running else 3
    except (StackProcessError, PostgresError, artifacts.ArtifactError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _kafka_cluster(args: argparse.Namespace) -> int:
    cluster = KafkaCluster(port=args.port, brokers=args.brokers)
    if args.action == "start":
        running = all(cluster.pids().values())
        took = cluster.start()
        state = "already running" if running else f"ready in {took:.1f}s"
        print(f"kafka {artifacts.KAFKA_VERSION} cluster of {cluster.brokers} KRaft nodes (PLAINTEXT, replication factor "
              f"3, min.insync.replicas 2) {state}; bootstrap {cluster.bootstrap}; data in {cluster.home}")
    elif args.action == "stop":
        cluster.stop()
        print(f"kafka cluster on {cluster.bootstrap} stopped")
    elif args.action == "wipe":
        cluster.wipe()
        print(f"kafka cluster data in {cluster.home} wiped")
    else:
        pids = cluster.pids()
        for node in cluster.nodes:
            pid = pids[node.node_id]
            print(f"kafka node {node.node_id} on {node.bootstrap} (controller 127.0.0.1:{node.controller_port}): "
                  + (f"running, pid {pid}" if pid else "stopped"))
        return 0 if all(pids.values()) else 3
    return 0


def _spark(args: argparse.Namespace) -> int:
    cluster = SparkCluster(port=args.port, ui_port=args.ui_port, workers=args.workers, cores=args.cores,
                           memory=args.memory)
    if args.action == "start":
        running = cluster.master_pid() and all(cluster.worker_pids())
        took = cluster.start()
        st = cluster.status()
        state = "already running" if running else f"ready in {took:.1f}s"
        print(f"spark master {cluster.master_url} {state}: {st['alive_workers']} worker(s) ALIVE, {st['cores']} cores; "
              f"UI {cluster.ui_url}; logs in {cluster.home}")
    elif args.action == "stop":
        cluster.stop()
        print(f"spark master {cluster.master_url} and its workers stopped")
    elif args.action == "wipe":
        cluster.wipe()
        print(f"spark cluster state in {cluster.home} wiped")
    else:
        st = cluster.status()
        if not st["master_pid"]:
            print(f"spark master {cluster.master_url}: stopped")
        else:
            print(f"spark master {cluster.master_url}: running, pid {st['master_pid']}, UI {cluster.ui_url}; "
                  f"{st['alive_workers']} worker(s) ALIVE, {st['cores']} cores ({st['cores_used']} used), "
                  f"{len(st['active_apps'])} running application(s)")
        for w in st["workers"]:
            print(f"  worker {w['index']} (UI {w['ui']}): " + (f"running, pid {w['pid']}" if w["pid"] else "stopped")
                  + (", ALIVE in the master" if w["alive"] else ""))
        return 0 if st["master_pid"] and all(w["alive"] for w in st["workers"]) else 3
    return 0


def _server_jars(extra: str) -> list[str]:
    """What the default runner's jobs need on the server's classpath: the Kafka connector (with the
    Avro formats' jars) and, once fetched, S3A for sinks on an S3 API; then ``--jars``."""
    from offsetbatch.dag.spark_jars import spark_connector_jars, spark_s3a_jars

    try:
        s3a = spark_s3a_jars()
    except artifacts.ArtifactError:
        print("note: Hadoop's S3A jars are not fetched ('offsetbatch-stack fetch'): sinks on S3 cannot run on this "
              "server", file=sys.stderr)
        s3a = []
    return spark_connector_jars() + s3a + [j for j in extra.split(",") if j]


def _stack_bootstrap() -> str | None:
    """The stack's broker, when it runs without security: the Connect server's warm-up meets it (a
    secured one would keep a client without credentials waiting for its timeout)."""
    broker = KafkaBroker(port=int(os.environ.get("KAFKA_PORT", "9092")))
    return broker.bootstrap if broker.pid() and broker.formatted_security() == "plaintext" else None


def _spark_connect(args: argparse.Namespace) -> int:
    jars = _server_jars(args.jars) if args.action == "start" else []
    server = SparkConnectServer(port=args.port, master=args.master, jars=jars, driver_memory=args.driver_memory)
    if args.action == "start":
        running = server.pid() is not None
        took = server.start(warm=args.warm, kafka_bootstrap=args.kafka_bootstrap or _stack_bootstrap())
        state = "already running" if running else f"ready in {took:.1f}s" + (" (warmed up)" if args.warm else "")
        print(f"spark connect server {server.url} (master {server.running_master() or args.master}) {state}, "
              f"pid {server.pid()}; log {server.log_file}")
    elif args.action == "stop":
        server.stop()
        print(f"spark connect server {server.url} stopped")
    elif args.action == "wipe":
        server.wipe()
        print(f"spark connect state in {server.home} wiped")
    else:
        pid = server.pid()
        print(f"spark connect server {server.url}: "
              + (f"running, pid {pid}, master {server.running_master()}" if pid else "stopped"))
        return 0 if pid else 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
