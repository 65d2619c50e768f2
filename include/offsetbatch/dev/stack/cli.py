"""``offsetbatch-stack``: fetch artifacts and start/stop the local Kafka broker and PostgreSQL.

    offsetbatch-stack fetch                      resolve broker + Spark connector jars (once)
    offsetbatch-stack kafka start|stop|status|wipe [--port 9092] [--secure [--acl]]
    offsetbatch-stack postgres start|stop|status|wipe [--port 54329]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from offsetbatch.dev.stack import artifacts
from offsetbatch.dev.stack.kafka_broker import BrokerError, KafkaBroker
from offsetbatch.dev.stack.kafka_security import ADMIN, PIPELINE
from offsetbatch.dev.stack.postgres import PostgresCluster, PostgresError


def _print_secure_paths(broker: KafkaBroker) -> None:
    """Where clients find the trust anchor and credentials: paths only, never the secrets."""
    print(f"  CA certificate (ssl.ca.location): {broker.ca_file}")
    print(f"  {PIPELINE} user's Kafka connection extra (owner-only JSON): {broker.credentials_file(PIPELINE)}")
    print(f"  {ADMIN} user's Kafka connection extra (owner-only JSON): {broker.credentials_file(ADMIN)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="offsetbatch-stack", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="service", required=True)
    sub.add_parser("fetch", help="resolve the Kafka broker and Spark connector jars from Maven Central")
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
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    logging.getLogger("kafka").setLevel(logging.WARNING)
    try:
        if args.service == "fetch":
            print(f"kafka broker jars:    {artifacts.fetch_kafka()}")
            print(f"spark connector jars: {artifacts.fetch_spark_connector()}")
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
