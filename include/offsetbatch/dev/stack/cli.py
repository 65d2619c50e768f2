"""``offsetbatch-stack``: fetch artifacts and start/stop the local Kafka broker and PostgreSQL.

    offsetbatch-stack fetch                      resolve broker + Spark connector jars (once)
    offsetbatch-stack kafka start|stop|status|wipe [--port 9092]
    offsetbatch-stack postgres start|stop|status|wipe [--port 54329]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from offsetbatch.dev.stack import artifacts
from offsetbatch.dev.stack.kafka_broker import BrokerError, KafkaBroker
from offsetbatch.dev.stack.postgres import PostgresCluster, PostgresError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="offsetbatch-stack", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="service", required=True)
    sub.add_parser("fetch", help="resolve the Kafka broker and Spark connector jars from Maven Central")
    for name, port_env, default in (("kafka", "KAFKA_PORT", 9092), ("postgres", "PG_PORT", 54329)):
        p = sub.add_parser(name, help=f"manage the local {name} server")
        p.add_argument("action", choices=["start", "stop", "status", "wipe"])
        p.add_argument("--port", type=int, default=int(os.environ.get(port_env, default)))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    logging.getLogger("kafka").setLevel(logging.WARNING)
    try:
        if args.service == "fetch":
            print(f"kafka broker jars:    {artifacts.fetch_kafka()}")
            print(f"spark connector jars: {artifacts.fetch_spark_connector()}")
        elif args.service == "kafka":
            broker = KafkaBroker(port=args.port)
            if args.action == "start":
                took = broker.start()
                print(f"kafka {artifacts.KAFKA_VERSION} (KRaft) ready on {broker.bootstrap}, pid {broker.pid()}, in {took:.1f}s; data in {broker.data_dir}")
            elif args.action == "stop":
                broker.stop()
                print(f"kafka on {broker.bootstrap} stopped")
            elif args.action == "wipe":
                broker.wipe()
                print(f"kafka data in {broker.home} wiped")
            else:
                pid = broker.pid()
                print(f"kafka on {broker.bootstrap}: " + (f"running, pid {pid}" if pid else "stopped"))
                return 0 if pid else 3
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
    except (BrokerError, PostgresError, artifacts.ArtifactError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
