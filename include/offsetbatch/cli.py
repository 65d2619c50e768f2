"""``offsetbatch``: the operator's view of pipelines, from the ledger and the broker.

    offsetbatch status [PIPELINE] [--json]        frontier, log end, lag (records, time), last batches
    offsetbatch batches PIPELINE [--limit N] [--json]
    offsetbatch batch PIPELINE BATCH_ID [--json]   ranges, stats, output location

Pipelines are the YAML files in include/pipelines/ (``--pipelines DIR`` for another folder).
Exit codes: 0 ok, 1 Kafka or the ledger could not be reached, 2 bad config or usage,
3 pipeline or batch not found.
"""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console

from offsetbatch import report
from offsetbatch.config import PIPELINES_DIR, ConfigError, PipelineConfig, load_all
from offsetbatch.kafka_source import KafkaSource, bootstrap_from_connection
from offsetbatch.layout import TableLayout
from offsetbatch.ledger import Ledger, LedgerError
from offsetbatch.status import batch_dict, pipeline_status

EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, EXIT_NOT_FOUND = 0, 1, 2, 3


class NotFound(LookupError):
    pass


def _configs(args) -> dict[str, PipelineConfig]:
    configs = load_all(args.pipelines)
    name = getattr(args, "pipeline", None)
    if name:
        if name not in configs:
            raise NotFound(f"no pipeline '{name}' in {args.pipelines} (have: {', '.join(sorted(configs)) or 'none'})")
        return {name: configs[name]}
    return configs


def cmd_status(args, out: Console) -> int:
    statuses = []
    unreachable = False
    for cfg in _configs(args).values():
        ledger = Ledger.for_config(cfg)
        try:
            try:
                kafka = KafkaSource(bootstrap_from_connection(cfg.kafka.conn_id))
            except Exception as exc:  # noqa: BLE001 - show the ledger side anyway
                kafka, err = None, f"{type(exc).__name__}: {exc}"
            else:
                err = None
            try:
                st = pipeline_status(cfg, ledger, kafka, batches=args.batches)
            finally:
                if kafka is not None:
                    kafka.close()
            st.kafka_error = st.kafka_error or err
            unreachable |= st.kafka_error is not None
            statuses.append(st)
        finally:
            ledger.dispose()
    if args.json:
        print(json.dumps([s.to_dict() for s in statuses], indent=1, default=str))
    else:
        for st in statuses:
            out.print(report.status_table(st))
            out.print(report.batches_table(f"{st.pipeline}: last {args.batches} batches", st.batches))
    return EXIT_UNREACHABLE if unreachable else EXIT_OK


def cmd_batches(args, out: Console) -> int:
    cfg = _configs(args)[args.pipeline]
    ledger = Ledger.for_config(cfg)
    try:
        rows = [batch_dict(b) for b in ledger.list_batches(cfg.name, args.limit)]
    finally:
        ledger.dispose()
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
    else:
        out.print(report.batches_table(f"{cfg.name}: last {args.limit} batches", rows))
    return EXIT_OK


def cmd_batch(args, out: Console) -> int:
    cfg = _configs(args)[args.pipeline]
    ledger = Ledger.for_config(cfg)
    try:
        try:
            b = batch_dict(ledger.get_batch(cfg.name, args.batch_id))
        except LedgerError as exc:
            raise NotFound(str(exc)) from None
    finally:
        ledger.dispose()
    layout = TableLayout(cfg.sink.path)
    b["output"] = {"data": layout.data(args.batch_id), "rejected": layout.rejected(args.batch_id),
                   "manifest": layout.manifest(args.batch_id)}
    if args.json:
        print(json.dumps(b, indent=1, default=str))
        return EXIT_OK
    out.print(report.batches_table(f"{cfg.name}: batch {args.batch_id}", [b]))
    out.print(report.ranges_table("ranges [from, until)", [b]))
    for k, v in b["output"].items():
        out.print(f"{k}: {v}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="offsetbatch", description="Operator view of offsetbatch pipelines.",
                                     epilog="exit codes: 0 ok, 1 Kafka/ledger unreachable, 2 bad config or usage, 3 not found")
    parser.add_argument("--pipelines", default=str(PIPELINES_DIR), help="folder of pipeline YAML files")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("status", help="frontier, log end and lag per partition; last batches")
    p.add_argument("pipeline", nargs="?")
    p.add_argument("--batches", type=int, default=5)
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("batches", help="batch history of a pipeline")
    p.add_argument("pipeline")
    p.add_argument("--limit", type=int, default=20)
    p.set_defaults(func=cmd_batches)
    p = sub.add_parser("batch", help="one batch: ranges, stats, output location")
    p.add_argument("pipeline")
    p.add_argument("batch_id", type=int)
    p.set_defaults(func=cmd_batch)
    for sp in sub.choices.values():
        sp.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    out = Console(width=max(Console().width, 120))
    try:
        return args.func(args, out)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except NotFound as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except LedgerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE


if __name__ == "__main__":
    sys.exit(main())
