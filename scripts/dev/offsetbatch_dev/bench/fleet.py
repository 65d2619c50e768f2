"""The fleet benchmark (issue 53, item 3): N pipelines on one Airflow and one Spark Connect server.

    python -m offsetbatch_dev.bench.fleet --sizes 10,50,100 --minutes 10 --rate 2000 [--master spark://…|standalone]

Per N: N topics of ``--partitions`` partitions, N pipeline YAMLs in one folder (``OFFSETBATCH_PIPELINES``)
read by the project's own DAG file (``dags/offsetbatch_pipelines.py``: one DAG per YAML), one pool of one
slot per pipeline (what ``make setup`` imports), every pipeline under its lag trigger and no cron, all of
them sharing one PostgreSQL ledger (the production shape) and each landing a files table of its own.
Services: ``airflow api-server``, ``scheduler`` (LocalExecutor), ``triggerer`` and ``dag-processor``,
their metadata in a fresh PostgreSQL database per N; every Spark job a session on one Spark Connect server
(restarted per N), in front of ``local[2]`` or, with ``--master``, a Spark standalone cluster.

The rule: each pipeline gets ``rate / N`` records/s; ``min_records`` = ``--cadence`` seconds of them (a
run about every ``--cadence`` s), ``max_delay`` = ``--cadence`` (what drains the last records, fewer than
``min_records``, after the producer stops), ``poll`` = ``--poll``: one shared poll of the cluster for the
whole fleet (same Kafka connection and poll interval).

Once all N DAGs are parsed, unpaused and their triggers watching, one producer (confluent-kafka) writes
``--rate`` records/s for ``--minutes``, record i to topic i mod N, spread over its partitions, each
stamped by the producer (CreateTime); then the pipelines drain (at most ``--drain-minutes``). Measured:

* per record: latency = its batch's ``published_at`` in the ledger minus its Kafka timestamp; per
  pipeline and fleet-wide p50/p95/max;
* every record once: each pipeline's files table read with pyarrow (``offsetbatch_dev.verify``, not our
  reader), every produced id present once; none missing, none doubled;
* runs/h: the DAG runs that succeeded during the producing window / its length (fleet and per pipeline),
  and how long runs and tasks waited in Airflow's queues (``dag_run.queued_at`` → start,
  ``task_instance.queued_dttm`` → start) from the metadata DB;
* CPU-seconds and peak RSS per service from /proc (``fleet_probes.Sampler``, every 2 s, over the window
  from the producer's start to the drain's end): api-server, scheduler (its own process), task
  processes (the scheduler's LocalExecutor workers and the task processes they fork), triggerer,
  dag-processor (and the parsing processes it forks), Spark Connect server (JVM and Python workers),
  PostgreSQL, Kafka broker, the standalone cluster with ``--master standalone``; per batch: the sum over
  all services / batches committed in the window;
* DAG parsing: ``dag.last_parse_duration`` of the DAG file (Airflow's dag-processor writes it on each
  parse: ``dag_processing.manager`` → ``update_dag_parsing_results_in_db``), sampled from the metadata DB;
  also the wall time from the dag-processor's start until all N DAGs are in the DB;
* the shared poll's time per cycle: a probe on the triggerer's PYTHONPATH only
  (``fleet_triggerer_probe/sitecustomize.py``) times the poll's Kafka read and each pipeline's decision on
  it; a cycle is from its read's start to the last decision on that reading;
* ledger transaction times: the benchmark times, every 5 s under load, one write transaction (the
  pipeline lock of a probe pipeline in the shared ledger, an event row, COMMIT: what every plan and
  commit task opens with) and one read (a fleet pipeline's frontier), on the fleet's ledger database.

Results: a table per N, docs/benchmarks.md between the ``fleet`` markers, raw figures in
``.local/bench-fleet/results.json``. It refuses a busy machine (``--allow-load``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import yaml
from rich.console import Console
from rich.table import Table

from offsetbatch.paths import local_dir

from offsetbatch_dev import PROJECT_ROOT, verify
from offsetbatch_dev.bench import quiet, report
from offsetbatch_dev.bench.freshness import triggered_pipeline
from offsetbatch_dev.bench.fleet_probes import CADENCES, Sampler, capacity, percentiles
from offsetbatch_dev.sample.producer import ensure_topic, make_event
from offsetbatch_dev.stack.airflow_services import AirflowServices
from offsetbatch_dev.stack.kafka_broker import KafkaBroker
from offsetbatch_dev.stack.postgres import PostgresCluster
from offsetbatch_dev.stack.spark_connect import SparkConnectServer

CONNECT_CONN = "spark_connect_fleet"
PROBE_DIR = Path(__file__).resolve().parent / "fleet_triggerer_probe"
TARGET_P95_S, TARGET_PARSE_S, TARGET_FLAT = 120.0, 30.0, 1.5
SERVICES = ("api-server", "scheduler", "task processes", "triggerer", "dag-processor", "Spark Connect server",
            "Spark cluster", "PostgreSQL", "Kafka broker")


class FleetServices(AirflowServices):
    """``AirflowServices`` plus ``airflow dag-processor`` (Airflow 3 parses DAG files only there), with
    the shared-poll probe on the triggerer's PYTHONPATH."""

    def __init__(self, *args, probe: Path, **kwargs):
        super().__init__(*args, **kwargs)
        self.probe = probe

    def start(self, timeout_s: float = 300) -> None:
        super().start(timeout_s)
        self.procs.append(self._launch(["airflow", "dag-processor"]))

    def _launch(self, cmd: list[str], again: bool = False) -> subprocess.Popen:
        if cmd[1] != "triggerer":
            return super()._launch(cmd, again)
        env = {**self.env, "OFFSETBATCH_FLEET_PROBE": str(self.probe),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(PROBE_DIR), self.env.get("PYTHONPATH")]))}
        log = open(self.root / f"{cmd[1]}.log", "a" if again else "w")
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self) -> None:
        """The scheduler first (its running tasks end with it), then the rest: a task that outlived the
        API server would fail on the execution API and be counted as a failed try."""
        import signal

        for p in self.procs:
            if p.args[1] == "scheduler" and p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        super().stop()

    def pids(self) -> dict[str, int]:
        return {p.args[1]: p.pid for p in self.procs if p.poll() is None}


# ---- the fleet's pipelines ----------------------------------------------------------------------

def rule_for(rate: int, n: int, cadence: float, poll: float) -> dict:
    """The lag trigger of one of ``n`` pipelines sharing ``rate`` records/s: a run about every
    ``cadence`` s by count, and by age for the last records after the producer stops."""
    return {"min_records": max(1, round(rate / n * cadence)), "max_delay": f"{cadence:g}s", "poll": f"{poll:g}s"}


def pipeline_yaml(folder: Path, tables: Path, name: str, topic: str, ledger_url: str, rule: dict) -> Path:
    cfg = triggered_pipeline(name, topic, {"path": str(tables / name), "event_time_column": "event_time"}, ledger_url,
                             rule, connect_conn=CONNECT_CONN)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


# ---- the producer ------------------------------------------------------------------------------

@dataclass
class Produced:
    """What the producer wrote, per topic: the ids and, per partition, offset -> CreateTime (ms)."""

    ids: dict[str, set[str]] = field(default_factory=dict)
    stamps: dict[str, dict[int, dict[int, int]]] = field(default_factory=dict)
    failed: int = 0
    started: float = 0.0
    ended: float = 0.0

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.ids.values())


def produce_fleet(bootstrap: str, topics: list[str], rate: int, seconds: float, partitions: int, prefix: str,
                  console: Console) -> Produced:
    """``rate`` records/s for ``seconds`` in 10 ms ticks (as ``freshness.produce_steadily``), record i
    to ``topics[i % N]``, partition ``(i // N) % partitions``: every topic gets ``rate / N`` a second."""
    from confluent_kafka import Producer

    out = Produced(ids={t: set() for t in topics}, stamps={t: {} for t in topics})
    lock = threading.Lock()

    def delivered(err, msg) -> None:
        with lock:
            if err is not None:
                out.failed += 1
            else:
                out.stamps[msg.topic()].setdefault(msg.partition(), {})[msg.offset()] = msg.timestamp()[1]

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True})
    rng = random.Random(42)
    n, tick, seq = len(topics), 0.01, 0
    out.started = time.time()
    started = time.monotonic()
    next_report = started + 60
    while (elapsed := time.monotonic() - started) < seconds:
        due = int(elapsed * rate) + 1
        while seq < due:
            topic = topics[seq % n]
            event = make_event(rng, seq, datetime.now(timezone.utc), prefix)
            producer.produce(topic, json.dumps(event).encode(), key=str(event["user_id"]).encode(),
                             partition=(seq // n) % partitions, on_delivery=delivered)
            out.ids[topic].add(event["event_id"])
            seq += 1
        producer.poll(0)
        if time.monotonic() >= next_report:
            console.log(f"produced {seq:,} records in {elapsed:.0f} s ({seq / elapsed:,.0f}/s)")
            next_report += 60
        time.sleep(max(0.0, started + (int(elapsed / tick) + 1) * tick - time.monotonic()))
    out.ended = time.time()
    producer.flush(60)
    if out.failed:
        raise RuntimeError(f"{out.failed} of {seq} records were not delivered; the measurement is void")
    return out


# ---- what is watched while it runs -------------------------------------------------------------

class Metadata:
    """Airflow's metadata DB, read directly (cheaper than N REST calls every few seconds)."""

    def __init__(self, url: str, prefix: str):
        import sqlalchemy as sa

        self.sa, self.engine, self.like = sa, sa.create_engine(url, pool_size=1, max_overflow=1), f"{prefix}%"

    def q(self, sql: str) -> list:
        with self.engine.connect() as conn:
            return conn.execute(self.sa.text(sql), {"like": self.like}).all()

    def dags(self) -> list:
        return self.q("SELECT dag_id, is_paused, last_parsed_time, last_parse_duration FROM dag "
                      "WHERE dag_id LIKE :like AND NOT is_stale")

    def runs(self) -> list:
        return self.q("SELECT dag_id, state, queued_at, start_date, end_date FROM dag_run WHERE dag_id LIKE :like")

    def tasks(self) -> list:
        return self.q("SELECT dag_id, task_id, state, queued_dttm, start_date, end_date, try_number FROM task_instance "
                      "WHERE dag_id LIKE :like")

    def dispose(self) -> None:
        self.engine.dispose()


class Watch:
    """A thread that every few seconds notes the DAG file's parse durations (metadata DB) and times
    two ledger transactions on the fleet's ledger (``LedgerProbe``)."""

    def __init__(self, meta: Metadata, ledger, names: list[str], interval: float = 5.0):
        self.meta, self.ledger, self.names, self.interval = meta, ledger, names, interval
        # one parse of the DAG file -> its seconds: every DAG of the file gets the parse's duration
        # (its own last_parsed_time, though), so the duration tells the parses apart
        self.parses: dict[str, float] = {}
        self.write_s: list[float] = []
        self.read_s: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fleet-watch", daemon=True)
        self.measuring = False

    def note_parses(self) -> list:
        rows = self.meta.dags()
        for r in rows:
            if r.last_parsed_time is not None and r.last_parse_duration is not None:
                self.parses[f"{r.last_parse_duration:.9f}"] = float(r.last_parse_duration)
        return rows

    def probe_ledger(self) -> None:
        t0 = time.perf_counter()
        with self.ledger.lock("fleet_probe") as conn:
            self.ledger.event(conn, "fleet_probe", "fleet_probe", {"at": time.time()})
        self.write_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        self.ledger.frontier_now(random.choice(self.names))
        self.read_s.append(time.perf_counter() - t0)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.note_parses()
                if self.measuring:
                    self.probe_ledger()
            except Exception:  # noqa: BLE001 - a missed sample; the next one comes
                pass

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def poll_cycles(path: Path, since: float, until: float) -> tuple[list[float], list[float], int]:
    """From the probe's file: each shared poll's read seconds, and each cycle's (read start to the last
    decision on that reading), for readings in [since, until]; and how many readings no pipeline
    decided on (every trigger had fallen more than two polls behind: ``lag_trigger.STALE_POLLS``)."""
    if not path.exists():
        return [], [], 0
    reads: list[tuple[float, float]] = []
    last_decision: dict[float, float] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        try:
            if parts[0] == "read":
                reads.append((float(parts[1]), float(parts[2])))
            elif parts[0] == "decide":
                at = float(parts[1])
                last_decision[at] = max(last_decision.get(at, 0.0), float(parts[3]))
        except (IndexError, ValueError):
            continue
    read_s, cycle_s, undecided = [], [], 0
    ats = sorted(last_decision)
    for start, end in reads:
        if not since <= end <= until:
            continue
        read_s.append(end - start)
        # the reading's ``at`` is stamped right after the read returns: the first at >= end
        i = int(np.searchsorted(ats, end - 0.002))
        if i < len(ats) and ats[i] - end < 1.0:
            cycle_s.append(last_decision[ats[i]] - start)
        else:
            undecided += 1
    return read_s, cycle_s, undecided


# ---- one N ---------------------------------------------------------------------------------------

def frontier_reached(ledger, names: list[str], ends: dict[str, dict[int, int]]) -> set[str]:
    done = set()
    for name in names:
        front = {r["partition"]: r["next_offset"] for r in ledger.frontier_rows(name)}
        if all(front.get(p, 0) >= end for p, end in ends[name].items()):
            done.add(name)
    return done


def record_latencies(ledger, name: str, stamps: dict[int, dict[int, int]]) -> tuple[np.ndarray, list[dict]]:
    """Every landed record's latency (s): its batch's ``published_at`` minus its CreateTime; and the
    committed batches (planned and published, epoch s)."""
    arrays = {p: (np.array(sorted(offs)), np.array([offs[o] for o in sorted(offs)], dtype=float) / 1000)
              for p, offs in stamps.items()}
    out, batches = [], []
    for b in ledger.list_batches(name, 100_000):
        if b.status != "committed" or not b.stats.get("published_at"):
            continue
        seen = b.stats["published_at"].replace(tzinfo=timezone.utc).timestamp()
        planned = b.stats["planned_at"].replace(tzinfo=timezone.utc).timestamp()
        batches.append({"batch": b.batch_id, "records": b.records, "planned": planned, "published": seen,
                        "commit_seconds": b.stats.get("commit_seconds"), "job_seconds": b.stats.get("job_seconds")})
        for r in b.ranges:
            if r.partition not in arrays:
                continue
            offs, ts = arrays[r.partition]
            lo, hi = np.searchsorted(offs, r.from_offset), np.searchsorted(offs, r.until_offset)
            out.append(seen - ts[lo:hi])
    return (np.concatenate(out) if out else np.array([])), batches


def _seconds(pairs) -> list[float]:
    return [(b - a).total_seconds() for a, b in pairs if a is not None and b is not None]


def measure_size(n: int, args, work: Path, base_env: dict, broker: KafkaBroker, pg: PostgresCluster,
                 console: Console) -> dict:
    from offsetbatch.ledger import Ledger

    root = work / f"n{n}"
    shutil.rmtree(root, ignore_errors=True)
    pipelines_dir, tables, dags = root / "pipelines", root / "tables", root / "dags"
    for d in (pipelines_dir, tables, dags):
        d.mkdir(parents=True)
    load_at_start = os.getloadavg()
    stamp = int(time.time())
    names = [f"fleet{n}_{i:03d}" for i in range(n)]
    topics = [f"fleet-{n}-{i:03d}-{stamp}" for i in range(n)]
    ledger_url = pg.create_database(f"offsetbatch_fleet_ledger_{n}")
    rule = rule_for(args.rate, n, args.cadence, args.poll)
    for name, topic in zip(names, topics):
        pipeline_yaml(pipelines_dir, tables, name, topic, ledger_url, rule)
        ensure_topic(broker.bootstrap, topic, args.partitions)
    shutil.copy(PROJECT_ROOT / "dags" / "offsetbatch_pipelines.py", dags / "offsetbatch_pipelines.py")
    # The ledger's tables made once, as 'offsetbatch ledger init' does before a deployment's first runs.
    ledger = Ledger(ledger_url, create=True)
    meta_url = pg.create_database(f"airflow_fleet_{n}")
    env = {**base_env, "AIRFLOW__CORE__DAGS_FOLDER": str(dags), "AIRFLOW_HOME": str(root / "airflow"),
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": meta_url, "OFFSETBATCH_PIPELINES": str(pipelines_dir),
           "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False"}
    t0 = time.monotonic()
    subprocess.run(["airflow", "db", "migrate"], env=env, check=True, capture_output=True)
    pools = {f"offsetbatch_{name}": {"slots": 1, "description": f"offsetbatch pipeline {name}: one task at a time",
                                     "include_deferred": False} for name in names}
    (root / "pools.json").write_text(json.dumps(pools))
    subprocess.run(["airflow", "pools", "import", str(root / "pools.json")], env=env, check=True, capture_output=True)
    console.log(f"N = {n}: {n} topics, YAMLs, pools and a fresh metadata DB in {time.monotonic() - t0:.0f} s; rule "
                f"{rule}; starting Spark Connect and Airflow")
    connect = SparkConnectServer(port=args.connect_port, master=args.master_url, home=root / "spark-connect",
                                 conf={"spark.sql.shuffle.partitions": "2"})
    probe = root / "triggerer-probe.txt"
    services = FleetServices(env, root / "airflow-services", port=args.api_port, triggerer=True, probe=probe,
                             extra_env={"AIRFLOW__CORE__PARALLELISM": str(args.parallelism)})
    meta = Metadata(meta_url, f"offsetbatch_fleet{n}_")
    watch = Watch(meta, ledger, names)
    result: dict = {"n": n, "rate": args.rate, "minutes": args.minutes, "rule": rule, "load_at_start": load_at_start}
    try:
        connect.start()
        services.start()
        processor_started = time.monotonic()
        watch.start()
        deadline = processor_started + args.parse_timeout
        while True:
            rows = watch.note_parses()
            if len(rows) == n and not any(r.is_paused for r in rows):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(rows)} of {n} DAGs parsed and unpaused after {args.parse_timeout:.0f} s; "
                                   f"see {services.root / 'dag-processor.log'}")
            time.sleep(1)  # polling the metadata DB
        result["first_parse_wall_s"] = time.monotonic() - processor_started
        console.log(f"all {n} DAGs parsed and unpaused {result['first_parse_wall_s']:.0f} s after the dag-processor "
                    f"started (the file's parse: {max(watch.parses.values()):.1f} s)")
        while (watching := sum(f"pipeline {name}: lag trigger watching" in services.log("triggerer")
                               for name in names)) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the triggerer watches {watching} of {n} pipelines after {args.parse_timeout:.0f} s")
            time.sleep(2)  # polling the triggerer's log
        result["watching_wall_s"] = time.monotonic() - processor_started
        console.log(f"all {n} lag triggers watching {result['watching_wall_s']:.0f} s after the dag-processor started; "
                    f"{args.rate:,} records/s for {args.minutes:g} min over {n} topics")
        pids = services.pids()
        roots = {"api-server": pids["api-server"], "scheduler": pids["scheduler"], "triggerer": pids["triggerer"],
                 "dag-processor": pids["dag-processor"], "Spark Connect server": connect.pid(),
                 "PostgreSQL": int((pg.data_dir / "postmaster.pid").read_text().split()[0]), "Kafka broker": broker.pid()}
        if args.cluster is not None:
            roots["Spark cluster"] = args.cluster.master_pid()
            for i, pid in enumerate(args.cluster.worker_pids(), 1):
                if pid:
                    roots[f"Spark worker {i}"] = pid
        sampler = Sampler({k: v for k, v in roots.items() if v}, split={"scheduler": "task processes"})
        sampler.start()
        watch.measuring = True
        window_start = time.time()
        produced = produce_fleet(broker.bootstrap, topics, args.rate, args.minutes * 60, args.partitions, f"n{n}-",
                                 console)
        console.log(f"produced {produced.total:,} records; draining (at most {args.drain_minutes:g} min)")
        ends = {name: {p: max(offs) + 1 for p, offs in produced.stamps[topic].items()}
                for name, topic in zip(names, topics)}
        drain_deadline = time.monotonic() + args.drain_minutes * 60
        while True:
            done = frontier_reached(ledger, names, ends)
            busy = [r for r in meta.runs() if r.state in ("queued", "running")]
            if len(done) == n and not busy:
                break
            if time.monotonic() > drain_deadline:
                console.log(f"[red]not drained after {args.drain_minutes:g} min: {n - len(done)} pipelines behind, "
                            f"{len(busy)} runs queued or running[/]")
                break
            time.sleep(5)  # polling the ledger and the metadata DB
        window_end = time.time()
        result["drained"] = len(done) == n
        result["drain_s"] = window_end - produced.ended
        watch.measuring = False
        usage = sampler.stop()
        result["window_s"] = window_end - window_start
        # ---- figures
        per_pipeline, all_lat, batches_in_window, batches_total = [], [], 0, 0
        missing = duplicated = not_landed = 0
        commit_secs: list[float] = []
        for name, topic in zip(names, topics):
            lat, batches = record_latencies(ledger, name, produced.stamps[topic])
            check = verify.check(str(tables / name), produced.ids[topic], None, None, None)
            late = len(produced.ids[topic]) - int(lat.size)  # beyond the ledger's committed batches
            # lost: absent from the table though a committed batch covers it (the table's missing ids
            # beyond those not landed yet)
            miss, dup = max(0, len(check.missing) - late), sum(check.duplicates.values()) if check.duplicates else 0
            missing += miss
            duplicated += dup
            not_landed += late
            all_lat.append(lat)
            during = [b for b in batches if produced.started <= b["planned"] <= produced.ended]
            batches_in_window += sum(1 for b in batches if window_start <= b["published"] <= window_end)
            batches_total += len(batches)
            commit_secs += [b["commit_seconds"] for b in batches if b["commit_seconds"] is not None]
            per_pipeline.append({"name": name, "records": len(produced.ids[topic]), "landed": int(lat.size),
                                 "missing": miss, "not_landed": late, "duplicated": dup, "batches": len(batches),
                                 "runs_in_window": len(during),
                                 "runs_per_hour": len(during) / ((produced.ended - produced.started) / 3600),
                                 **percentiles(lat)})
        lat = np.concatenate(all_lat) if all_lat else np.array([])
        hours = (produced.ended - produced.started) / 3600
        runs = meta.runs()
        tasks = meta.tasks()
        succeeded = [r for r in runs if r.state == "success"]
        planned_in_window = sum(p["runs_in_window"] for p in per_pipeline)
        task_s = {t: percentiles(_seconds((x.start_date, x.end_date) for x in tasks if x.task_id == t and
                                          x.state == "success"), qs=(50,)) for t in ("plan", "spark_job", "commit")}
        read_s, cycle_s, undecided = poll_cycles(probe, window_start, window_end)
        cpu = {k: u.cpu_s for k, u in usage.items()}
        total_cpu = sum(cpu.values())
        result.update({
            "records": produced.total, "landed": int(lat.size), "not_landed": not_landed, "missing": missing,
            "duplicated": duplicated, "fleet": percentiles(lat),
            "pipeline_p95": percentiles([p["p95"] for p in per_pipeline if p["p95"] is not None], qs=(50,)),
            "worst_pipeline": max(per_pipeline, key=lambda p: p["p95"] or 0)["name"] if per_pipeline else None,
            "runs_per_hour": planned_in_window / hours, "runs_per_hour_per_pipeline": planned_in_window / hours / n,
            "task_s": {t: v["p50"] for t, v in task_s.items()},
            "runs": len(runs), "runs_failed": sum(r.state == "failed" for r in runs),
            "task_retries": sum(1 for t in tasks if (t.try_number or 1) > 1),
            "run_wall": percentiles(_seconds((r.start_date, r.end_date) for r in succeeded)),
            "run_queue_wait": percentiles(_seconds((r.queued_at, r.start_date) for r in runs)),
            "task_queue_wait": percentiles(_seconds((t.queued_dttm, t.start_date) for t in tasks)),
            "batches": batches_total, "batches_in_window": batches_in_window,
            "cpu_s": cpu, "cpu_s_total": total_cpu,
            "cpu_s_per_batch": total_cpu / batches_in_window if batches_in_window else None,
            "peak_rss_mb": {k: u.peak_rss / 2**20 for k, u in usage.items()},
            "task_process_peak_rss_mb": usage["task processes"].peak_one_rss / 2**20,
            "parse_s": percentiles(list(watch.parses.values())), "parses": len(watch.parses),
            "poll_read_s": percentiles(read_s), "poll_cycle_s": percentiles(cycle_s), "poll_cycles": len(cycle_s),
            "poll_undecided": undecided,
            "ledger_write_s": percentiles(watch.write_s), "ledger_read_s": percentiles(watch.read_s),
            "ledger_probes": len(watch.write_s),
            "commit_task_s": percentiles(commit_secs),
            "per_pipeline": per_pipeline,
        })
        f = result["fleet"]
        console.log(f"N = {n}: {produced.total:,} records, {int(lat.size):,} landed, missing {missing}, duplicated "
                    f"{duplicated}; fleet p50 {_f(f['p50'])} s, p95 {_f(f['p95'])} s, max {_f(f['max'])} s; "
                    f"{result['runs_per_hour']:.0f} runs/h; {_f(result['cpu_s_per_batch'])} CPU-s per batch")
        return result
    finally:
        watch.stop()
        services.stop()
        connect.stop()
        meta.dispose()
        ledger.dispose()


def _f(x, fmt: str = "{:.1f}") -> str:
    return "n/a" if x is None else fmt.format(x)


# ---- the report ----------------------------------------------------------------------------------

def targets(rows: list[dict]) -> list[tuple[str, bool | None, str]]:
    """(target, met (None: not measured at this size), the figures)."""
    out = []
    by_n = {r["n"]: r for r in rows}
    for r in rows:
        ok = (r["fleet"]["p95"] is not None and r["fleet"]["p95"] <= TARGET_P95_S and r["not_landed"] == 0
              and r["missing"] == 0 and r["duplicated"] == 0)
        out.append((f"N = {r['n']}: fleet-wide p95 ≤ {TARGET_P95_S:.0f} s, nothing lost or doubled", ok,
                    f"p95 {_f(r['fleet']['p95'])} s, {r['missing']:,} lost, {r['duplicated']:,} doubled, "
                    f"{r['not_landed']:,} not landed by the drain's end"))
    small, large = min(by_n), max(by_n)
    a, b = by_n[small]["cpu_s_per_batch"], by_n[large]["cpu_s_per_batch"]
    if small != large and a and b:
        out.append((f"CPU-s per batch flat from N = {small} to N = {large} (within {TARGET_FLAT}×)",
                    b / a <= TARGET_FLAT, f"{a:.1f} → {b:.1f} CPU-s ({b / a:.2f}×)"))
    else:
        out.append((f"CPU-s per batch flat from N = 10 to N = 100 (within {TARGET_FLAT}×)", None,
                    "needs two sizes"))
    for r in rows:
        p = r["parse_s"]["max"]
        out.append((f"N = {r['n']}: the DAG file's parse ≤ {TARGET_PARSE_S:.0f} s", p is not None and p <= TARGET_PARSE_S,
                    f"max {_f(p)} s over {r['parses']} parses"))
    return out


def capacity_lines(rows: list[dict]) -> list[str]:
    """How many pipelines this machine carries per cadence: from the CPU-s per batch of the largest N
    (with headroom), and from the most runs per hour the fleet sustained (its ceiling, no headroom)."""
    r = max(rows, key=lambda x: x["n"])
    c = r["cpu_s_per_batch"]
    if not c:
        return ["How many pipelines a deployment of this size carries: not computed (no batch committed)."]
    cores = os.cpu_count() or 1
    top = max(rows, key=lambda x: x["runs_per_hour"])
    per = ", ".join(f"{capacity(cores, c, rph)} at {name} cadence" for name, rph in CADENCES.items())
    ceiling = ", ".join(f"{int(top['runs_per_hour'] // rph):,} {name}" for name, rph in CADENCES.items())
    return [f"How many pipelines a deployment of this size carries: **{per}**. Formula: floor(0.7 × {cores} cores × "
            f"3,600 s / (CPU-s per batch × runs per hour per pipeline)), with the CPU-s per batch measured at N = "
            f"{r['n']} ({c:.1f} s over every service, their idle work included): 70 % of the cores for runs, the rest "
            f"headroom for the lag triggers to stay on time. The ceiling measured: the fleet sustained at most "
            f"{top['runs_per_hour']:,.0f} runs/h (N = {top['n']}), which is {ceiling} pipelines with no headroom at all "
            f"(a pipeline asking for more runs than its share gets fewer, larger batches and a later p95: the "
            f"per-pipeline runs/h and p95 above)."]


def measured_services(rows: list[dict]) -> list[str]:
    """The services measured in ``rows``, in ``SERVICES`` order, then any other (a cluster's workers)."""
    seen = [s for r in rows for s in r["cpu_s"]]
    return [s for s in SERVICES if s in seen] + sorted(set(seen) - set(SERVICES))


def section_name(args) -> str:
    """The doc section (and the work folder's name): the fleet on one machine, or on a cluster, or
    ``--section``."""
    return getattr(args, "section", None) or ("fleet" if args.master is None else "fleet-cluster")


def section(rows: list[dict], args, command: str, warning: str | None, smoke: bool) -> list[str]:
    master = args.master_url if getattr(args, "master_url", None) else args.master or "local[2]"
    lines = ([f"## {args.title}", ""] if getattr(args, "title", None) else
             ["## Fleet: N pipelines on one Airflow and one Spark Connect server (issue 53, item 3)", ""]
             if args.master is None else
             ["## Fleet on a Spark cluster: the Connect server in front of a standalone cluster (issue 53, item 4)", "",
              "The same fleet with one change, the Connect server's `--master`: its jobs' executors run on a Spark "
              "standalone cluster's worker (1 worker of 2 cores and 2 GiB, as `offsetbatch-stack spark start` "
              "makes one) instead of in its own JVM. On one machine the cluster adds processes, not cores: this run "
              "shows what the knob costs and that the fleet keeps its promise there; the cores come when the "
              "workers are other machines.", ""])
    if smoke:
        lines += ["**Smoke run** (a short check of the benchmark itself, not the measurement: the real one is "
                  "`make bench-fleet` (or `make bench BENCH_ARGS='--phases fleet'`), 10 minutes per N at N = 10, 50, 100).", ""]
    lines += [
        f"{report.stamp(command)}. {report.machine()}. Per N: N topics of {args.partitions} partitions, N pipelines "
        f"(one DAG each from `dags/offsetbatch_pipelines.py`, one-slot pool each, files sink each, one shared "
        f"PostgreSQL ledger) under their lag triggers only (`min_records` = {args.cadence:g} s of a pipeline's share "
        f"of the rate, `max_delay: {args.cadence:g}s`, `poll: {args.poll:g}s`, one shared poll), on `airflow "
        f"api-server`, `scheduler` (LocalExecutor, parallelism {args.parallelism}), `triggerer` and `dag-processor` "
        f"(metadata in PostgreSQL, fresh per N) and one Spark Connect server (`--master {master}`). A producer writes "
        f"{args.rate:,} records/s spread evenly over the N topics for {args.minutes:g} min, then the pipelines drain "
        f"(at most {args.drain_minutes:g} min). Latency: the ledger's `published_at` of the record's batch minus its "
        f"Kafka timestamp, for every record; once: each table read with pyarrow. CPU and RSS from /proc every 2 s, "
        f"over the producing and draining window.", ""]
    if warning:
        lines += [f"**Measured on a busy machine:** {warning}.", ""]
    lines += ["| N | load at start (1/5/15 min) | records | lost | doubled | not landed by the drain's end | fleet p50 (s) | p95 (s) | "
              "max (s) | per-pipeline p95 median / max (s) | runs/h (fleet) | runs/h per pipeline | run wall p50 (s) | "
              "plan / spark_job / commit p50 (s) | "
              "run queued→start p95 (s) | task queued→start p95 (s) | CPU-s per batch | DAG file parse p50 / max (s) | "
              "shared poll cycle p50 / p95 (s) | ledger write tx p50 / p95 (ms) |",
              "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: "
              "| ---: | --- | --- | --- |"]
    for r in rows:
        f, pp = r["fleet"], r["pipeline_p95"]
        ms = lambda x: _f(None if x is None else x * 1000, "{:.0f}")  # noqa: E731
        lines.append(
            f"| {r['n']} | {' / '.join(f'{x:.1f}' for x in r['load_at_start'])} | {r['records']:,} | {r['missing']:,} | "
            f"{r['duplicated']:,} | {r['not_landed']:,} | {_f(f['p50'])} | {_f(f['p95'])} | {_f(f['max'])} | "
            f"{_f(pp['p50'])} / {_f(pp['max'])} | {r['runs_per_hour']:.0f} | {r['runs_per_hour_per_pipeline']:.1f} | "
            f"{_f(r['run_wall']['p50'])} | {' / '.join(_f(r['task_s'][t]) for t in ('plan', 'spark_job', 'commit'))} | "
            f"{_f(r['run_queue_wait']['p95'])} | {_f(r['task_queue_wait']['p95'])} | "
            f"{_f(r['cpu_s_per_batch'])} | {_f(r['parse_s']['p50'])} / {_f(r['parse_s']['max'])} | "
            f"{_f(r['poll_cycle_s']['p50'], '{:.2f}')} / {_f(r['poll_cycle_s']['p95'], '{:.2f}')} | "
            f"{ms(r['ledger_write_s']['p50'])} / {ms(r['ledger_write_s']['p95'])} |")
    services = measured_services(rows)
    lines += ["", "CPU-seconds over the window (per batch in brackets) and peak RSS (MiB) of each service's process tree:",
              "", "| N | batches | " + " | ".join(services) + " | all | one task process, peak RSS (MiB) |",
              "| ---: | ---: | " + " | ".join("---:" for _ in services) + " | ---: | ---: |"]
    for r in rows:
        b = r["batches_in_window"] or 1
        cells = [f"{r['cpu_s'][s]:,.0f} ({r['cpu_s'][s] / b:.2f}), {r['peak_rss_mb'][s]:,.0f} MiB" if s in r["cpu_s"]
                 else "" for s in services]
        lines.append(f"| {r['n']} | {r['batches_in_window']:,} | " + " | ".join(cells) +
                     f" | {r['cpu_s_total']:,.0f} ({_f(r['cpu_s_per_batch'], '{:.2f}')}) | "
                     f"{r['task_process_peak_rss_mb']:,.0f} |")
    lines += ["", "Where the time went (the profile to read when a target is missed):", ""]
    for r in rows:
        t = r["task_s"]
        share = {k: v for k, v in t.items() if v is not None}
        top = max(share, key=share.get) if share else None
        lines.append(
            f"* N = {r['n']}: a run's wall p50 {_f(r['run_wall']['p50'])} s, of it plan {_f(t['plan'])} s, spark_job "
            f"{_f(t['spark_job'])} s, commit {_f(t['commit'])} s (p50s){f'; most in {top}' if top else ''}; tasks "
            f"waited p50 {_f(r['task_queue_wait']['p50'])} s, p95 {_f(r['task_queue_wait']['p95'])} s from queued to "
            f"running (executor slots: parallelism {args.parallelism}); {r['runs']} runs, {r['runs_failed']} failed, "
            f"{r['task_retries']} task retries; {'drained' if r['drained'] else 'not drained'} "
            f"{r['drain_s']:.0f} s after the producer stopped; busiest service "
            f"{max(r['cpu_s'], key=r['cpu_s'].get)} ({max(r['cpu_s'].values()):,.0f} CPU-s of "
            f"{r['cpu_s_total']:,.0f} in {r['window_s']:.0f} s, on {os.cpu_count()} cores).")
    lines += ["", "Targets:", ""]
    for what, ok, figures in targets(rows):
        lines.append(f"* {'✓' if ok else '–' if ok is None else '✗'} {what}: {figures}.")
    lines += ["", *capacity_lines(rows), "",
              "What each figure is measured from: latency and runs from the ledger (`published_at`, `planned_at`; runs/h: "
              "the batches planned while the producer wrote, per hour of it) and "
              "Airflow's metadata DB (`dag_run`, `task_instance`); parse times from `dag.last_parse_duration`, which the "
              "dag-processor writes on every parse of the file (one file holds all N DAGs, so it is the parse of N "
              "pipelines); the shared poll's cycle from a probe on the triggerer's PYTHONPATH only (its Kafka read's "
              "start to the last pipeline's decision on that reading"
              + (f"; readings no pipeline decided on, every trigger more than two polls behind: "
                 + ", ".join(f"{r['poll_undecided']} at N = {r['n']}" for r in rows)) +
              "); ledger transactions timed by the benchmark every 5 s on the fleet's ledger database (the pipeline "
              "lock of a probe pipeline, an event row, COMMIT), beside the runs' own.", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offsetbatch_dev.bench.fleet", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,50,100", help="pipeline counts N, comma-separated")
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the producer writes, per N")
    parser.add_argument("--rate", type=int, default=2000, help="records/s over the whole fleet")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--cadence", type=float, default=60.0, help="seconds of records a run reads (min_records), "
                        "and max_delay")
    parser.add_argument("--poll", type=float, default=5.0, help="the lag triggers' poll interval (s)")
    parser.add_argument("--parallelism", type=int, default=8, help="Airflow's core.parallelism (LocalExecutor workers)")
    parser.add_argument("--drain-minutes", type=float, default=10.0)
    parser.add_argument("--parse-timeout", type=float, default=900.0, help="seconds for all DAGs to be parsed")
    parser.add_argument("--master", default=None, help="the Connect server's Spark master: spark://host:port, or "
                        "'standalone' to start a Spark standalone cluster (1 worker, 2 cores) for the run; default local[2]")
    parser.add_argument("--api-port", type=int, default=int(os.environ.get("FLEET_API_PORT", "18390")))
    parser.add_argument("--connect-port", type=int, default=int(os.environ.get("FLEET_CONNECT_PORT", "15390")))
    parser.add_argument("--smoke", action="store_true", help="mark the section as a smoke run")
    parser.add_argument("--section", default=None, help="the docs/benchmarks.md section (default fleet, or "
                        "fleet-cluster with --master) and the work folder's name")
    parser.add_argument("--title", default=None, help="the section's heading")
    parser.add_argument("--allow-load", action="store_true")
    parser.add_argument("--docs", default=str(PROJECT_ROOT / "docs"))
    parser.add_argument("--from-results", default=None, help="write the section again from a results.json (and the "
                        "same arguments) without running anything")
    args = parser.parse_args(argv)
    console = Console(width=max(Console().width, 200))
    started = time.monotonic()
    if args.from_results:
        rows = json.loads(Path(args.from_results).read_text())
        saved = json.loads((Path(args.from_results).parent / "run.json").read_text())
        args.master_url = saved.get("master_url")
        return finish(rows, args, saved["command"], saved["warning"], console, started, Path(args.from_results))
    warning = quiet.check_start(console, args.allow_load)
    command = report.command_line("offsetbatch_dev.bench.fleet", argv)
    work = local_dir() / section_name(args).replace("fleet", "bench-fleet")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    broker = KafkaBroker(port=int(os.environ.get("KAFKA_PORT", "9092")))
    pg = PostgresCluster(port=int(os.environ.get("PG_PORT", "54329")))
    # Stopped at the end only if this run started them (make stack-up's are left as they were).
    ours = {"broker": broker.pid() is None, "postgres": not (pg.data_dir / "postmaster.pid").exists()}
    broker.start()
    pg.start()
    args.cluster = None
    args.master_url = args.master or "local[2]"
    rows: list[dict] = []
    try:
        if args.master == "standalone":
            from offsetbatch_dev.stack.spark_cluster import SparkCluster

            args.cluster = SparkCluster(port=17177, ui_port=18280, workers=1, cores=2, memory="2g", home=work / "spark")
            args.cluster.start()
            args.master_url = args.cluster.master_url
        env = {**os.environ, "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
               "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka",
                                                         "extra": {"bootstrap.servers": broker.bootstrap}}),
               f"AIRFLOW_CONN_{CONNECT_CONN.upper()}": json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1",
                                                                   "port": args.connect_port}),
               "OFFSETBATCH_HOME": str(work)}
        env.pop("OFFSETBATCH_FAULTS", None)
        (work / "run.json").write_text(json.dumps({"command": command, "warning": warning,
                                                   "master_url": args.master_url}))
        for n in (int(x) for x in args.sizes.split(",")):
            rows.append(measure_size(n, args, work, env, broker, pg, console))
            (work / "results.json").write_text(json.dumps(rows, indent=1, default=str))
    finally:
        if args.cluster is not None:
            args.cluster.stop()
        if ours["postgres"]:
            pg.stop()
        if ours["broker"]:
            broker.stop()
    return finish(rows, args, command, warning, console, started, work / "results.json")


def finish(rows: list[dict], args, command: str, warning: str | None, console: Console, started: float,
           raw: Path) -> int:
    """The tables on the console, the section in docs/benchmarks.md; 1 if a record was lost, doubled or late."""
    table = Table(title=f"fleet: {args.rate:,} records/s over N pipelines, {args.minutes:g} min per N")
    for col in ("N", "records", "lost", "dup", "not landed", "p50 s", "p95 s", "max s", "runs/h", "CPU-s/batch",
                "parse max s", "poll cycle p95 s", "ledger tx p95 ms"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["n"]), f"{r['records']:,}", str(r["missing"]), str(r["duplicated"]), str(r["not_landed"]),
                      _f(r["fleet"]["p50"]), _f(r["fleet"]["p95"]), _f(r["fleet"]["max"]), f"{r['runs_per_hour']:.0f}",
                      _f(r["cpu_s_per_batch"], "{:.2f}"), _f(r["parse_s"]["max"]), _f(r["poll_cycle_s"]["p95"], "{:.2f}"),
                      _f(None if r["ledger_write_s"]["p95"] is None else r["ledger_write_s"]["p95"] * 1000, "{:.0f}"))
    console.print(table)
    services = Table(title="CPU-s over the window / peak RSS MiB, per service")
    names = measured_services(rows)
    for col in ("N", "batches", *names):
        services.add_column(col, justify="right")
    for r in rows:
        services.add_row(str(r["n"]), str(r["batches_in_window"]),
                         *[f"{r['cpu_s'][s]:,.0f} / {r['peak_rss_mb'][s]:,.0f}" if s in r["cpu_s"] else "" for s in names])
    console.print(services)
    for what, ok, figures in targets(rows):
        console.print(f"{'✓' if ok else '–' if ok is None else '✗'} {what}: {figures}")
    Path(args.docs).mkdir(parents=True, exist_ok=True)
    report.write_section(Path(args.docs) / "benchmarks.md", section_name(args),
                         section(rows, args, command, warning, args.smoke))
    console.print(f"written to {Path(args.docs) / 'benchmarks.md'} (raw: {raw}) in "
                  f"{(time.monotonic() - started) / 60:.1f} min")
    bad = [r for r in rows if r["missing"] or r["duplicated"] or r["not_landed"]]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
