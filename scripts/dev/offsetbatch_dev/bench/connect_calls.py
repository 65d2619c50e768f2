"""The Spark Connect round trips a piece of client code makes: every AnalyzePlan (a ``df.schema``,
``df.columns``, ``spark.version``), ExecutePlan (an action, a write, a ``spark.sql`` command) and
Config (a ``spark.conf.set``) the client sends, with its wall time. Each is one gRPC call, and each
AnalyzePlan or ExecutePlan makes the server analyze the plan it carries.

    with counting() as calls:
        run_batches(spark, specs, attempt, {})
    print(summary(calls))

Patches ``SparkConnectClient`` (pyspark 4.3.0's, internal) for the duration only: benchmarks, not
the product.
"""

from __future__ import annotations

import time
import traceback
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator


@dataclass
class Call:
    kind: str  # AnalyzePlan, ExecutePlan, Config
    what: str  # the analysis asked for, or the config operation
    seconds: float
    where: str = ""  # the innermost offsetbatch frame that made it (module:line function)


def _caller() -> str:
    for frame in reversed(traceback.extract_stack()[:-3]):
        if "/offsetbatch/" in frame.filename and "offsetbatch_dev" not in frame.filename:
            return f"{frame.filename.rsplit('/offsetbatch/', 1)[1]}:{frame.lineno} {frame.name}"
    return "?"


@contextmanager
def counting() -> Iterator[list[Call]]:
    from pyspark.sql.connect.client.core import SparkConnectClient

    calls: list[Call] = []
    originals = {name: getattr(SparkConnectClient, name) for name in ("_analyze", "_execute", "_execute_and_fetch",
                                                                       "config")}

    def timed(name: str, kind: str, what):
        original = originals[name]

        def wrapper(self, *args, **kwargs):
            t0 = time.monotonic()
            try:
                return original(self, *args, **kwargs)
            finally:
                calls.append(Call(kind, what(args, kwargs), time.monotonic() - t0, _caller()))
        return wrapper

    SparkConnectClient._analyze = timed("_analyze", "AnalyzePlan", lambda a, k: k.get("method") or a[0])
    SparkConnectClient._execute = timed("_execute", "ExecutePlan", lambda a, k: "command")
    SparkConnectClient._execute_and_fetch = timed("_execute_and_fetch", "ExecutePlan", lambda a, k: "plan")
    SparkConnectClient.config = timed("config", "Config", lambda a, k: a[0].WhichOneof("op_type") if a else "?")
    try:
        yield calls
    finally:
        for name, original in originals.items():
            setattr(SparkConnectClient, name, original)


def summary(calls: list[Call]) -> str:
    """``N round trips, S s: 5 AnalyzePlan (schema 4, spark_version 1) 0.41 s, ...``"""
    parts = []
    for kind in ("AnalyzePlan", "ExecutePlan", "Config"):
        mine = [c for c in calls if c.kind == kind]
        if mine:
            whats = Counter(c.what for c in mine)
            parts.append(f"{len(mine)} {kind} ({', '.join(f'{w} {n}' for w, n in whats.items())}) "
                         f"{sum(c.seconds for c in mine):.2f} s")
    return f"{len(calls)} round trips, {sum(c.seconds for c in calls):.2f} s: " + "; ".join(parts)
