"""``offsetbatch``: the operator's view of pipelines, from the ledger and the broker.

    offsetbatch status [PIPELINE] [--json]        frontier, log end, lag (records, time), last batches
    offsetbatch batches PIPELINE [--limit N] [--json]
    offsetbatch batch PIPELINE BATCH_ID [--json]   ranges, stats, output location
    offsetbatch events PIPELINE [--limit N] [--all] [--json]   audit log: resets, replays, data loss; who and why
    offsetbatch reset PIPELINE --to TARGET [--allow-rewind] [--allow-data-loss] [--apply] [--reason TEXT]
    offsetbatch replay PIPELINE (--batch N ... | --from TS --to TS) [--trigger]
    offsetbatch doctor                              Kafka, ledger, Spark connector, Airflow connections
    offsetbatch ledger init [PIPELINE]              create the ledger(s) on purpose (runs never create one over a table)
    offsetbatch ledger rebuild PIPELINE [--apply]   a lost ledger, rebuilt from the table's published manifests

Pipelines are the installed ones (``offsetbatch.config.installed``: ``OFFSETBATCH_PIPELINES``, as the DAGs
and the UI read it); ``--pipelines`` names other files or folders (``:``-separated).
Exit codes: 0 ok, 1 Kafka or the ledger could not be reached or read (doctor: a check failed), 2 bad
config or usage, 3 pipeline or batch not found, 4 request refused (invalid value; nothing changed).
Every failure is one line on stderr, ``error: …``; stdout holds only tables or ``--json`` output (log
records, Airflow's included, go to stderr: ``_stdout_for_output_only``).

No command here creates a ledger: reads open an existing one or fail (``Ledger`` without ``create``).
"""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import shlex
import sqlite3
import subprocess
import sys
from contextlib import contextmanager, redirect_stdout
from typing import Any, Iterator

import sqlalchemy as sa
from kafka.errors import KafkaError
from rich.console import Console
from rich.table import Table

from offsetbatch import redact
from offsetbatch.commit import ownership
from offsetbatch.config import PIPELINES_DIR, installed
from offsetbatch.errors import (ConfigError, KafkaUnreachableError, MaintenanceError, OffsetbatchError,
                                PipelineError)
from offsetbatch.ledger import Ledger, LedgerError, LedgerMissingError, queries
from offsetbatch.ops import report
from offsetbatch.ops.status import batch_dict, pipeline_status
from offsetbatch.pipeline import Pipeline

EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_REFUSED = 0, 1, 2, 3, 4


class NotFound(LookupError):
    pass


class UsageError(ValueError):
    """Options that do not go together (exit 2, as argparse's own usage errors)."""


ERRORS: dict[type[Exception], int] = {}  # error type -> exit code (filled below NotFound)


# Counts go into SQL LIMIT: the ledger's databases take a signed 64-bit integer there.
MAX_COUNT = 2**63 - 1


def positive_int(text: str) -> int:
    """argparse type of counts (``--limit``, ``--batches``): a zero or negative count is a typo,
    not a request for everything; one beyond a 64-bit integer is a typo too (and the database
    driver's ``OverflowError``)."""
    shown = repr(text) if len(text) <= 40 else repr(text[:39] + "…")
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {shown}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {shown}")
    if n > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be a positive integer up to {MAX_COUNT}, got {shown}")
    return n


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error format: one line on stderr, ``error: …``, exit 2 (argparse's
    own is a usage block and a second line). Subcommand parsers are made of this class too."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"error: {self.prog}: {_one_line(message)} (see '{self.prog} --help')\n")


def _pipelines(args) -> dict[str, Pipeline]:
    """The installed pipelines (``--pipelines``, else ``OFFSETBATCH_PIPELINES``: what the DAGs and the
    UI see too), or the one the command names. A source that is missing or holds no pipeline is a
    usage error, not an empty (and successful) answer; a config file that does not load is one
    warning on stderr and does not stop commands about the other pipelines (a command over every
    pipeline still exits 2 after its output: ``main``)."""
    found = installed.read(args.pipelines)
    args.broken_configs = len(found.errors)
    if found.missing:
        raise ConfigError(found.missing[0])
    for problem in found.errors:
        print(f"warning: {_one_line(problem)}", file=sys.stderr)
    configs = found.configs
    where = ", ".join(str(s) for s in installed.sources(args.pipelines))
    if not configs and not found.errors:
        raise ConfigError(f"pipelines folder {where} holds no pipeline (no *.yaml / *.yml file); pass the folders "
                          f"or files of pipeline YAML with --pipelines or {installed.ENV}")
    name = getattr(args, "pipeline", None)
    if name:
        if name not in configs:
            broken = f"; {len(found.errors)} config file(s) do not load (warned above)" if found.errors else ""
            raise NotFound(f"no pipeline '{name}' in {where} (have: {', '.join(sorted(configs)) or 'none'}){broken}")
        return {name: Pipeline(configs[name])}
    if not configs:
        raise ConfigError(f"no pipeline config in {where} loads: {_one_line(found.errors[0])}")
    return {n: Pipeline(cfg) for n, cfg in configs.items()}


def _pipeline(args) -> Pipeline:
    """The one pipeline the command names."""
    return _pipelines(args)[args.pipeline]


@contextmanager
def _ledger(pipeline: Pipeline) -> Iterator[Ledger]:
    """The pipeline's existing ledger (never created here). A connection that is not defined is a
    config error (``Pipeline.ledger_url``); a database error (a damaged SQLite file, a server failing
    mid-read) becomes one ``LedgerError`` line naming the pipeline and the ledger URL, password hidden."""
    cfg, url = pipeline.cfg, pipeline.ledger_url()
    try:
        try:
            ledger = pipeline.ledger()
        except LedgerError as exc:  # missing or unreachable: say whose ledger it is
            raise type(exc)(f"pipeline {cfg.name}: {exc}") from None
        with ledger:
            yield ledger
    except (sa.exc.SQLAlchemyError, sqlite3.Error) as exc:
        raise LedgerError(f"pipeline {cfg.name}: cannot read the ledger at {_shown(url)}: {_db_reason(exc)}. Nothing "
                          f"was changed. Check ledger.url or its Airflow connection ('offsetbatch doctor'); a damaged "
                          f"ledger file must be restored from a backup.") from None


def _shown(url: str) -> str:
    try:
        return redact.url(sa.make_url(url).render_as_string(hide_password=True))
    except sa.exc.ArgumentError:
        return "(an invalid URL)"


def _db_reason(exc: Exception) -> str:
    """The database's own words, without SQLAlchemy's SQL echo and background link."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _one_line(exc: BaseException | str) -> str:
    return " ".join(str(exc).split())


def _print_json(out: Console, data: Any, **kwargs) -> None:
    """``--json`` output, on the real stdout (``out.file``; ``sys.stdout`` is stderr while a command runs)."""
    print(json.dumps(data, indent=1, **kwargs), file=out.file)


# The loggers of Airflow's secrets masker (the task SDK's copy and the core's), muted below ERROR by ``main``.
MASKER_LOGGERS = ("airflow.sdk._shared.secrets_masker.secrets_masker", "airflow._shared.secrets_masker.secrets_masker")


def _errors_only(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR


@contextmanager
def _stdout_for_output_only() -> Iterator[None]:
    """While a command runs, whatever is not its output goes to stderr. Importing Airflow (reading a
    connection does) sets up logging to stdout, and its secrets masker logs a warning there ("Skipping
    masking for a secret as it's too short (<5 chars)") for a connection password under 5
    characters: ``--json`` output would not parse. So handlers that write to stdout write to stderr
    until the command returns, and ``sys.stdout`` is stderr (handlers and loggers Airflow makes now
    take it); the command prints to its Console's file, the real stdout."""
    real = sys.stdout
    moved = []
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        for handler in getattr(logger, "handlers", ()):  # a PlaceHolder has none
            if isinstance(handler, logging.StreamHandler) and handler.stream in (real, sys.__stdout__):
                old = handler.setStream(sys.stderr)
                if old is not None:
                    moved.append((handler, old))
    try:
        with redirect_stdout(sys.stderr):
            yield
    finally:
        for handler, old in moved:
            handler.setStream(old)


def cmd_ledger_init(args, out: Console) -> int:
    """Create the ledger of each pipeline (one per database), or say it exists: the one command that
    creates a ledger, besides a pipeline's first run over an empty table."""
    rows, seen = [], set()
    for pipeline in _pipelines(args).values():
        url = pipeline.ledger_url()
        if url in seen:
            continue
        seen.add(url)
        try:
            with pipeline.ledger() as ledger:
                rows.append({"ledger": _shown(url), "ledger_id": ledger.identity, "created": False})
        except LedgerMissingError:
            with pipeline.ledger(create=True) as ledger:
                rows.append({"ledger": _shown(url), "ledger_id": ledger.identity, "created": True})
    if args.json:
        _print_json(out, rows)
    else:
        t = Table(title="offsetbatch ledgers", title_justify="left")
        for col in ("ledger", "identity", ""):
            t.add_column(col)
        for r in rows:
            t.add_row(r["ledger"], r["ledger_id"], "[green]created[/]" if r["created"] else "exists")
        out.print(t)
    return EXIT_OK


def cmd_ledger_rebuild(args, out: Console) -> int:
    """Dry run: what the table's manifests say the lost ledger held. ``--apply``: write it into the
    pipeline's ledger (created if missing; refused if it already has batches of the pipeline)."""
    from offsetbatch.commit.rebuild import apply_rebuild, plan_rebuild

    pipeline = _pipeline(args)
    plan = plan_rebuild(pipeline.name, pipeline.sink)
    identity = None
    if args.apply:
        with pipeline.ledger(create=True) as ledger:
            apply_rebuild(ledger, pipeline.sink, plan, actor=f"cli:{getpass.getuser()}")
            identity = ledger.identity
    if args.json:
        _print_json(out, {**plan.to_dict(), "applied": args.apply, "ledger_id": identity})
        return EXIT_OK
    out.print(report.rebuild_table(plan, applied=args.apply))
    out.print(f"ledger {identity} now owns {plan.table}" if args.apply else
              "dry run: nothing changed; add --apply to write this into the pipeline's ledger")
    return EXIT_OK


def cmd_maintain(args, out: Console) -> int:
    """One maintenance pass (``offsetbatch.maintenance.run``): retention, compaction, bounded
    ledger history; ``--dry-run`` prints the actions and changes nothing."""
    from offsetbatch.maintenance import maintain

    pipeline = _pipeline(args)
    with _ledger(pipeline) as ledger:
        try:
            result = maintain(pipeline, ledger, dry_run=args.dry_run, actor=f"cli:{getpass.getuser()}")
        except (OffsetbatchError, KafkaError):
            raise  # already one line naming the pipeline and what to do
        except Exception as exc:  # noqa: BLE001 - a sink's or catalog's own error, maybe after some actions
            raise MaintenanceError(
                f"pipeline {pipeline.name}: the maintenance pass failed: {redact.url(f'{type(exc).__name__}: {exc}')}"
                f". `offsetbatch events {pipeline.name}` shows which of its actions were done; each is finished by "
                f"the next pass, so fix the cause and run it again.") from exc
    if args.json:
        _print_json(out, result.to_dict())
        return EXIT_OK
    out.print(report.maintenance_table(result))
    if args.dry_run:
        out.print("dry run: nothing changed; run without --dry-run to apply")
    return EXIT_OK


def cmd_status(args, out: Console) -> int:
    statuses = []
    summarized: dict[str, str | None] = {}  # the line saying what ledger maintenance summarized
    unreachable = False
    for pipeline in _pipelines(args).values():
        cfg = pipeline.cfg
        with _ledger(pipeline) as ledger:
            ownership.check(cfg.name, ledger, pipeline.sink)  # a lost or mistyped ledger is refused
            try:
                kafka = pipeline.kafka()
            except Exception as exc:  # noqa: BLE001 - show the ledger side anyway
                kafka, err = None, f"{type(exc).__name__}: {exc}"
            else:
                err = None
            try:
                st = pipeline_status(pipeline, ledger, kafka, batches=args.batches)
            finally:
                if kafka is not None:
                    kafka.close()
            summarized[cfg.name] = queries.history_line(queries.history_summary(ledger, cfg.name))
        st.kafka_error = st.kafka_error or err
        unreachable |= st.kafka_error is not None
        statuses.append(st)
    if args.json:
        _print_json(out, [s.to_dict() for s in statuses], default=str)
    else:
        for st in statuses:
            out.print(report.status_table(st))
            out.print(report.batches_table(f"{st.pipeline}: last {args.batches} batches", st.batches))
            if summarized.get(st.pipeline):
                out.print(summarized[st.pipeline], markup=False, highlight=False)
    return EXIT_UNREACHABLE if unreachable else EXIT_OK


def cmd_batches(args, out: Console) -> int:
    pipeline = _pipeline(args)
    cfg = pipeline.cfg
    with _ledger(pipeline) as ledger:
        rows = [batch_dict(b) for b in ledger.list_batches(cfg.name, args.limit)]
        line = queries.history_line(queries.history_summary(ledger, cfg.name))
    if args.json:
        _print_json(out, rows, default=str)
    else:
        out.print(report.batches_table(f"{cfg.name}: last {args.limit} batches", rows))
        if line:
            out.print(line, markup=False, highlight=False)
    return EXIT_OK


def cmd_batch(args, out: Console) -> int:
    from offsetbatch.plan.request import check_batch_id

    pipeline = _pipeline(args)
    cfg = pipeline.cfg
    check_batch_id(cfg.name, args.batch_id)  # before the ledger: its BIGINT overflows in the driver
    with _ledger(pipeline) as ledger:
        try:
            b = batch_dict(ledger.get_batch(cfg.name, args.batch_id))
        except LedgerError as exc:
            raise NotFound(str(exc)) from None
    b["output"] = pipeline.sink.locations(b.get("target_batch_id") or args.batch_id)
    if args.json:
        _print_json(out, b, default=str)
        return EXIT_OK
    out.print(report.batches_table(f"{cfg.name}: batch {args.batch_id}", [b]))
    out.print(report.ranges_table("ranges [from, until)", [b]))
    for k, v in b["output"].items():
        out.print(f"{k}: {v}")
    return EXIT_OK


def cmd_events(args, out: Console) -> int:
    """The audit log: resets (target, who, why), replays and backfills planned, data skipped."""
    pipeline = _pipeline(args)
    cfg = pipeline.cfg
    with _ledger(pipeline) as ledger:
        rows = queries.event_rows(ledger, cfg.name, args.limit, routine=args.all)
    if args.json:
        _print_json(out, rows, default=str)
    else:
        scope = "events" if args.all else "events (without routine batch bookkeeping: --all shows it)"
        out.print(report.events_table(f"{cfg.name}: {len(rows)} newest {scope}", rows))
        if not rows:
            out.print(f"no audit events recorded for {cfg.name} yet")
    return EXIT_OK


def cmd_reset(args, out: Console) -> int:
    from offsetbatch.plan.request import RunRequest, parse_reset_target
    from offsetbatch.plan.reset import run_reset

    pipeline = _pipeline(args)
    cfg = pipeline.cfg
    req = RunRequest("reset", reset_to=parse_reset_target(cfg.name, args.to), dry_run=not args.apply,
                     allow_rewind=args.allow_rewind, allow_data_loss=args.allow_data_loss, reason=args.reason,
                     actor=f"cli:{getpass.getuser()}")
    with _ledger(pipeline) as ledger, pipeline.kafka() as kafka:
        plan = run_reset(pipeline, ledger, kafka, req)
    if args.json:
        _print_json(out, {**plan.to_dict(), "applied": args.apply})
    else:
        out.print(report.reset_table(plan, applied=args.apply))
        if not args.apply:
            out.print("dry run: add --apply to move the frontier")
    return EXIT_OK


def cmd_replay(args, out: Console) -> int:
    from offsetbatch.plan.replay import plan_window, replay_targets
    from offsetbatch.plan.request import from_params

    where = f"replay {args.pipeline}"
    if args.batch and (args.start or args.end):
        window = " ".join(f"{opt} {v}" for opt, v in (("--from", args.start), ("--to", args.end)) if v)
        raise UsageError(f"{where}: give batch ids (--batch N, repeatable) or a window (--from TS --to TS), not both; "
                         f"got --batch {' --batch '.join(map(str, args.batch))} and {window}. Nothing was done.")
    if not args.batch and not (args.start and args.end):
        given = f" (got only {'--from' if args.start else '--to'})" if args.start or args.end else ""
        raise UsageError(f"{where}: give batch ids (--batch N, repeatable) or both --from TS and --to TS{given}. "
                         f"Nothing was done.")
    pipeline = _pipeline(args)
    cfg = pipeline.cfg
    conf = {"mode": "replay"}
    if args.batch:
        conf["batch_ids"] = ",".join(map(str, args.batch))
    else:
        conf.update(replay_start=args.start, replay_end=args.end)
    if args.reason:
        conf["reason"] = args.reason
    if args.allow_more_rejected:
        conf["allow_more_rejected"] = True
    req = from_params(cfg.name, conf)
    with _ledger(pipeline) as ledger, ledger.reading() as conn:
        if req.batch_ids:
            targets, history = replay_targets(pipeline, ledger, conn, req.batch_ids), []
        else:
            with pipeline.kafka() as kafka:
                targets, history = plan_window(pipeline, ledger, conn, kafka, req.window)
    command = ["airflow", "dags", "trigger", cfg.dag_id, "--conf", json.dumps(conf)]
    summary = {"pipeline": cfg.name, "dag_id": cfg.dag_id, "replays": [b.batch_id for b in targets],
               "backfills": [[str(r) for r in rs] for rs in history], "command": shlex.join(command)}
    if args.json:
        _print_json(out, summary)
    else:
        out.print(report.batches_table(f"{cfg.name}: batches to re-execute (output replaced, frontier untouched)",
                                       [batch_dict(b) for b in targets]))
        for rs in history:
            out.print("new backfill batch (never read before): " + ", ".join(str(r) for r in rs))
        out.print(f"Airflow command: {shlex.join(command)}")
    if not targets and not history:
        print("nothing to replay: the request holds no records", file=sys.stderr)
        return EXIT_OK
    if args.trigger:
        proc = subprocess.run(command, capture_output=True, text=True)
        print(proc.stdout[-2000:] + proc.stderr[-2000:], file=sys.stderr)
        return EXIT_OK if proc.returncode == 0 else EXIT_UNREACHABLE
    return EXIT_OK


def cmd_pools(args, out: Console) -> int:
    """Every installed pipeline's one-slot pool, as ``airflow pools import`` reads it: backfill runs
    bypass ``max_active_runs``, the pool does not (docs/architecture.md, serialization)."""
    found = installed.read(args.pipelines)
    for problem in (*found.missing, *found.errors):
        print(f"offsetbatch pools: no pool (and no DAG) until this is fixed: {problem}", file=sys.stderr)
    _print_json(out, {c.pool: {"slots": 1, "description": f"offsetbatch pipeline {c.name}: one task at a time",
                               "include_deferred": False} for c in found.configs.values()})
    return EXIT_USAGE if found.missing else EXIT_OK  # a folder or file that is not there: the caller named it


def cmd_doctor(args, out: Console) -> int:
    from offsetbatch.ops.doctor import run_checks

    checks = run_checks(_pipelines(args))
    if args.json:
        _print_json(out, [vars(c) for c in checks])
    else:
        t = Table(title="offsetbatch doctor", title_justify="left")
        for col in ("check", "", "detail", "how to fix"):
            t.add_column(col)
        for c in checks:
            t.add_row(c.name, "[green]ok[/]" if c.ok else "[red]FAIL[/]", c.detail, c.fix if not c.ok else "")
        out.print(t)
    return EXIT_OK if all(c.ok for c in checks) else EXIT_UNREACHABLE


ERRORS.update({ConfigError: EXIT_USAGE, UsageError: EXIT_USAGE, NotFound: EXIT_NOT_FOUND, PipelineError: EXIT_REFUSED,
               KafkaError: EXIT_UNREACHABLE, KafkaUnreachableError: EXIT_UNREACHABLE,
               LedgerError: EXIT_UNREACHABLE,  # LedgerMissingError, LedgerUnreachableError, damaged ledgers
               sa.exc.SQLAlchemyError: EXIT_UNREACHABLE, sqlite3.Error: EXIT_UNREACHABLE,  # outside _ledger
               OffsetbatchError: EXIT_REFUSED})  # the rest of the family (commit, sink, artifacts); first match wins


def build_parser() -> argparse.ArgumentParser:
    """The commands, their arguments and help texts."""
    parser = _Parser(prog="offsetbatch", description="Operator view of offsetbatch pipelines.",
                     epilog="exit codes: 0 ok, 1 Kafka/ledger unreachable, 2 bad config or usage, 3 not found, "
                            "4 request refused (nothing changed)")
    parser.add_argument("--pipelines", default=None,
                        help=f"pipeline YAML files and folders of them, ':'-separated (default: ${installed.ENV}, else "
                             f"{PIPELINES_DIR or 'none when installed'})")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("status", help="frontier, log end and lag per partition; last batches")
    p.add_argument("pipeline", nargs="?")
    p.add_argument("--batches", type=positive_int, default=5, help="last N batches per pipeline (default 5)")
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("batches", help="batch history of a pipeline")
    p.add_argument("pipeline")
    p.add_argument("--limit", type=positive_int, default=20, help="newest N batches (default 20)")
    p.set_defaults(func=cmd_batches)
    p = sub.add_parser("batch", help="one batch: ranges, stats, output location")
    p.add_argument("pipeline")
    p.add_argument("batch_id", type=int)
    p.set_defaults(func=cmd_batch)
    p = sub.add_parser("events", help="audit log of a pipeline: resets, replays, data loss; when, who, why")
    p.add_argument("pipeline")
    p.add_argument("--limit", type=positive_int, default=20, help=f"newest N events (default 20, at most {queries.MAX_PAGE})")
    p.add_argument("--all", action="store_true", help="include the routine planned/committed events of incremental batches")
    p.set_defaults(func=cmd_events)
    p = sub.add_parser("reset", help="move the frontier (dry run unless --apply); audited in the ledger")
    p.add_argument("pipeline")
    p.add_argument("--to", required=True, help='earliest | latest | ISO timestamp | JSON {"topic": {"0": offset}}')
    p.add_argument("--allow-rewind", action="store_true", help="allow moving back over committed batches")
    p.add_argument("--allow-data-loss", action="store_true",
                   help="allow skipping unread records beyond the safety limit (they are recorded as gaps)")
    p.add_argument("--apply", action="store_true", help="change the ledger (default: show what would change)")
    p.add_argument("--reason", help="kept in the audit log")
    p.set_defaults(func=cmd_reset)
    p = sub.add_parser("replay", help="re-execute recorded batches through Airflow (prints or runs the trigger)")
    p.add_argument("pipeline")
    p.add_argument("--batch", type=int, action="append", help="batch id to replay (repeatable)")
    p.add_argument("--from", dest="start", help="window start, ISO timestamp with timezone")
    p.add_argument("--to", dest="end", help="window end (exclusive)")
    p.add_argument("--allow-more-rejected", action="store_true",
                   help="let the replay reject records the output it replaces holds (refused at commit otherwise)")
    p.add_argument("--reason", help="kept in the audit log")
    p.add_argument("--trigger", action="store_true", help="run 'airflow dags trigger' instead of printing it")
    p.set_defaults(func=cmd_replay)
    p = sub.add_parser("maintain", help="expire old snapshots, compact small files, trim history (audited)")
    p.add_argument("pipeline")
    p.add_argument("--dry-run", action="store_true", help="print what the pass would do; change nothing")
    p.set_defaults(func=cmd_maintain)
    p = sub.add_parser("pools", help="the pipelines' one-slot pools as JSON, for 'airflow pools import'")
    p.set_defaults(func=cmd_pools)
    p = sub.add_parser("doctor", help="check Kafka, ledger, Spark connector and Airflow connections")
    p.set_defaults(func=cmd_doctor, pipeline=None)
    # The ledger lifecycle: the only CLI path that passes create=True to Ledger; every other command
    # reads through _ledger(), which never creates.
    p = sub.add_parser("ledger", help="create a ledger on purpose, or rebuild a lost one from the table")
    lsub = p.add_subparsers(dest="ledger_command", required=True)
    lp = lsub.add_parser("init", help="create the ledger of a pipeline (or of every pipeline), or show it exists")
    lp.add_argument("pipeline", nargs="?")
    lp.set_defaults(func=cmd_ledger_init)
    lp = lsub.add_parser("rebuild", help="rebuild a pipeline's lost ledger from its table (dry run unless --apply)")
    lp.add_argument("pipeline")
    lp.add_argument("--apply", action="store_true", help="write the rebuilt batches, frontier and gaps (audited)")
    lp.set_defaults(func=cmd_ledger_rebuild)
    for sp in [*sub.choices.values(), *lsub.choices.values()]:
        sp.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    out = Console(file=sys.stdout, width=max(Console().width, 120))
    # stdout is for tables and --json only: the library's log lines go to stderr, and the Kafka
    # client's per-connection errors are dropped (the CLI reports failures itself).
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    # Airflow's secrets masker warns (once) that a connection secret under 5 characters cannot be
    # masked in logs: the CLI logs no secrets, and the warning would be a second stderr line next to
    # an error. (On stdout it broke --json; ``_stdout_for_output_only`` keeps any such line off it.)
    # A filter, not a level: Airflow's logging setup (on its import) resets the levels of its loggers.
    for name in MASKER_LOGGERS:
        logging.getLogger(name).addFilter(_errors_only)
    ours = logging.getLogger("offsetbatch")
    ours.handlers, ours.propagate = [logging.StreamHandler(sys.stderr)], False
    ours.setLevel(logging.INFO)
    try:
        with _stdout_for_output_only():
            code = args.func(args, out)
        if code == EXIT_OK and getattr(args, "broken_configs", 0) and not getattr(args, "pipeline", None):
            return EXIT_USAGE  # every pipeline was asked for, and some config does not load (warned above)
        return code
    except tuple(ERRORS) as exc:
        code = next(c for kind, c in ERRORS.items() if isinstance(exc, kind))
        print(f"error: {_error_text(exc)}", file=sys.stderr)
        return code


def _error_text(exc: Exception) -> str:
    """One line, whatever the error: a multi-line message (YAML errors, SQL echoes) is folded, and
    any URL's password or secret parameter in it masked (``redact.url``), whoever wrote the message."""
    if isinstance(exc, KafkaError):
        text = f"{type(exc).__name__}: {_one_line(exc)}. Is the broker up? ('offsetbatch doctor')"
    elif isinstance(exc, (sa.exc.SQLAlchemyError, sqlite3.Error)):
        text = f"ledger database error: {_db_reason(exc)}. Nothing was changed; check the ledger ('offsetbatch doctor')"
    else:
        text = _one_line(exc)
    return redact.url(text)


if __name__ == "__main__":
    sys.exit(main())
