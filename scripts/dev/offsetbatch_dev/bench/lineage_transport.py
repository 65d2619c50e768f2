"""What an OpenLineage backend that is down costs a pipeline run, and which settings bound it.

    python -m offsetbatch_dev.bench.lineage_transport [--records 10000] [--repeat 2]

Whole DAG runs (``airflow dags test`` of the benchmark pipeline, its job on a Spark Connect
server so that the run's own time is small), interleaved, with Airflow's OpenLineage provider:

* off (``[openlineage] disabled``), and a file transport (a healthy backend's floor);
* an HTTP transport to a closed port (connection refused) and to a listener that accepts and never
  answers (a hung backend), each with the provider's and client's defaults and with the bounded
  settings the README recommends (``BOUNDED``).

Every run must commit its batch. Writes the ``bench-lineage`` section of docs/benchmarks.md.
Runnable alone; not part of ``make bench``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from offsetbatch.paths import local_dir

from offsetbatch_dev import PROJECT_ROOT
from offsetbatch_dev.bench import quiet, report, throughput
from offsetbatch_dev.bench.dataset import ensure_dataset
from offsetbatch_dev.stack.kafka_broker import KafkaBroker
from offsetbatch_dev.stack.spark_connect import SparkConnectServer

CONNECT_CONN = "spark_connect_bench"
BOUNDED = {"execution_timeout": "3", "transport": {"timeout": 1, "retry": {"total": 1}}}


def _scenarios(refused: str, stalled: str, events: Path) -> dict[str, dict[str, str]]:
    def http(url: str, bounded: bool) -> dict[str, str]:
        transport = {"type": "http", "url": url, **(BOUNDED["transport"] if bounded else {})}
        env = {"AIRFLOW__OPENLINEAGE__DISABLED": "False", "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(transport)}
        if bounded:
            env["AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT"] = BOUNDED["execution_timeout"]
        return env

    return {
        "off": {"AIRFLOW__OPENLINEAGE__DISABLED": "True"},
        "file transport": {"AIRFLOW__OPENLINEAGE__DISABLED": "False", "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(events), "append": True})},
        "refused, defaults": http(refused, False),
        "never answers, defaults": http(stalled, False),
        "refused, bounded": http(refused, True),
        "never answers, bounded": http(stalled, True),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--allow-load", action="store_true")
    args = parser.parse_args(argv)
    from offsetbatch_dev.bench.__main__ import _airflow_env

    console = Console()
    warning = quiet.check_start(console, args.allow_load)
    work = local_dir() / "bench-lineage"
    work.mkdir(parents=True, exist_ok=True)
    broker = KafkaBroker(port=int(os.environ.get("KAFKA_PORT", "9092")))
    broker.start()
    ds = ensure_dataset(broker.bootstrap, f"bench-lineage-{args.records}-2", args.records, 2)
    connect = SparkConnectServer(home=work / "spark-connect", driver_memory="1g")
    connect.start()
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{closed.getsockname()[1]}"
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)  # the kernel completes every handshake; nothing ever reads
    stalled = f"http://127.0.0.1:{hung.getsockname()[1]}"
    env = {**_airflow_env(work, broker.bootstrap), f"AIRFLOW_CONN_{CONNECT_CONN.upper()}": json.dumps(
        {"conn_type": "spark_connect", "host": "127.0.0.1", "port": connect.port})}
    scenarios = _scenarios(refused, stalled, work / "events.jsonl")
    walls: dict[str, list[float]] = {name: [] for name in scenarios}
    try:
        # one run not counted: the first DAG run pays for first uses (the Connect session, the Airflow DB)
        throughput.whole_dag_run(ds, {**env, **scenarios["off"]}, work, -1, "1g", connect_conn_id=CONNECT_CONN)
        for rep in range(args.repeat):
            for name, extra in scenarios.items():
                busy = quiet.busy_before_run(console, name)
                sample, _ = throughput.whole_dag_run(ds, {**env, **extra}, work, rep, "1g", connect_conn_id=CONNECT_CONN)
                if sample.records != ds.records:
                    raise RuntimeError(f"{name}: the run read {sample.records} records, expected {ds.records}")
                walls[name].append(sample.wall)
                console.log(f"run {rep + 1}/{args.repeat}, {name}: {sample.wall:.1f} s wall"
                            f"{' (machine busy)' if busy > quiet.BUSY_LIMIT else ''}")
    finally:
        hung.close()
        connect.stop()
    base = statistics.median(walls["off"])
    table = Table(title="DAG run wall time by OpenLineage transport", title_justify="left")
    for col in ("transport", "median s", "runs", "added to the run"):
        table.add_column(col)
    lines = ["## OpenLineage: what a lineage backend that is down costs a run", "",
             f"{report.stamp('python -m offsetbatch_dev.bench.lineage_transport')}. Whole DAG runs "
             f"(`airflow dags test`, the job on Spark Connect) of {ds.records:,} records, {args.repeat} of each, "
             f"interleaved. Bounded: `AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT={BOUNDED['execution_timeout']}` and "
             f"the transport's `{json.dumps(BOUNDED['transport'])}`." + (f" **{warning}.**" if warning else ""), "",
             "| OpenLineage transport | DAG run wall, median (s) | runs (s) | added to the run (s) |",
             "| --- | ---: | --- | ---: |"]
    for name, xs in walls.items():
        med = statistics.median(xs)
        runs = ", ".join(f"{x:.1f}" for x in xs)
        table.add_row(name, f"{med:.1f}", runs, f"{med - base:+.1f}")
        lines.append(f"| {name} | {med:.1f} | {runs} | {med - base:+.1f} |")
    console.print(table)
    report.write_section(PROJECT_ROOT / "docs" / "benchmarks.md", "bench-lineage", lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
