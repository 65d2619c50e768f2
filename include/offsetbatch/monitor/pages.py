"""What each UI page and JSON answer holds, as plain dicts from the ledger, Kafka and the sinks.

Kept apart from the FastAPI routes (``app``) so the page logic is tested on a real ledger without a
web server, and the routes only map requests to these calls and ``PageError``s to HTTP statuses.
Messages are one sentence naming the pipeline or DAG; they never show server paths.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Callable, Iterator

import sqlalchemy as sa

from offsetbatch import redact
from offsetbatch.ledger import LedgerError, queries
from offsetbatch.monitor import health
from offsetbatch.monitor.sources import Sources
from offsetbatch.pipeline import Pipeline
from offsetbatch.sinks import sink_for

log = logging.getLogger(__name__)
PAGE = 50  # batches per history page
LAST_BATCHES = 10  # batches in the pipeline's JSON answer
POINTS = 200  # lag points on the pipeline page and by default in the API
MAX_POINTS = 2000
EVENTS = 20  # audit events on the pipeline page and in its API answer


class PageError(Exception):
    """A page that cannot be shown; the message is the one sentence the user reads."""


class NotFound(PageError):
    """No such pipeline, or no pipeline has that DAG id."""


class Forbidden(PageError):
    """The user may not read the pipeline's DAG (or its runs)."""


class Unavailable(PageError):
    """The pipeline's ledger is missing, unreachable or damaged (the other pipelines still show)."""


# ``may_read(pipeline, runs)``: whether the user may read the pipeline's DAG (``runs``: its DAG runs).
MayRead = Callable[[Pipeline, bool], bool]


def _anyone(pipeline: Pipeline, runs: bool = False) -> bool:
    return True


class Pages:
    """The pages one user may see; ``may_read`` is the web app's authorization (everyone if omitted)."""

    def __init__(self, sources: Sources, may_read: MayRead = _anyone):
        self.src = sources
        self.may_read = may_read

    # ---- which pipeline ---------------------------------------------------------------------

    def installed(self) -> dict[str, Pipeline]:
        """The installed pipelines that load (``Sources.pipelines``: a file that does not is logged
        and has no DAG either)."""
        return self.src.pipelines()

    def pipeline(self, name: str) -> Pipeline:
        """The pipeline ``name`` if the user may read its DAG. An unknown name says how many pipelines
        are configured, not where."""
        installed = self.installed()
        pipeline = installed.get(name)
        if pipeline is None:
            raise NotFound(f"no pipeline '{name}': {len(installed)} pipeline(s) are configured "
                           f"(OFFSETBATCH_PIPELINES); the Pipelines page lists those you may read")
        if not self.may_read(pipeline, False):
            raise Forbidden(f"you may not read DAG {pipeline.cfg.dag_id} (pipeline {name})")
        return pipeline

    def pipeline_of_dag(self, dag_id: str) -> Pipeline:
        """The pipeline behind a DAG's tab (the pipeline page checks who may read it)."""
        pipeline = self.src.by_dag_id(dag_id)
        if pipeline is None:
            raise NotFound(f"no offsetbatch pipeline has DAG id {dag_id}: this tab shows offsetbatch pipelines only")
        return pipeline

    # ---- pages ------------------------------------------------------------------------------

    def pipelines(self) -> dict:
        """Every pipeline the user may read, one row each; a ledger that cannot be read is one line
        in ``errors`` and does not hide the others."""
        rows, errors = [], []
        for pipeline in self.installed().values():
            cfg = pipeline.cfg
            if not self.may_read(pipeline, False):
                continue
            try:
                rows.append(self.overview(pipeline))
            except Exception as exc:  # noqa: BLE001 - one broken ledger must not hide the others
                if isinstance(exc, LedgerError):  # missing or unreachable: the message says it all
                    log.warning("pipeline %s: cannot read its ledger: %s", cfg.name, redact.url(str(exc)))
                else:
                    log.exception("pipeline %s: overview failed", cfg.name)
                errors.append(redact.url(f"pipeline {cfg.name}: cannot read its ledger: {type(exc).__name__}: "
                                         f"{_one_line(exc)}"))
        return {"pipelines": rows, "errors": errors}

    def overview(self, pipeline: Pipeline, lag: list[dict] | None = None) -> dict:
        """A pipeline's row: state and findings, lag, Kafka status and ledger summary. ``lag``: the
        lag history when the caller already has it (the rules need the last few points)."""
        cfg = pipeline.cfg
        ledger = self.src.ledger(pipeline)
        status = self.src.status(pipeline, ledger)
        summary = queries.summary(ledger, cfg.name)
        if lag is None:
            lag = queries.lag_history(ledger, cfg.name, points=health.GROWING_RUNS + 1)
        state, findings = health.assess(status, summary, lag)
        known = all(p["lag_seconds"] is not None for p in status["partitions"])
        lag_seconds = max((p["lag_seconds"] or 0 for p in status["partitions"]), default=0) if known else None
        return {"name": cfg.name, "dag_id": cfg.dag_id, "state": state, "findings": health.as_dicts(findings),
                "lag_seconds": lag_seconds, "status": status, "summary": summary}

    def detail(self, pipeline: Pipeline, before: int | None = None, limit: int = PAGE, points: int = POINTS) -> dict:
        """The pipeline page: its overview, lag history, gaps, audit events and one page of batches
        (``page``: ``queries.batch_page``, each batch located and flagged when it follows a gap)."""
        cfg = pipeline.cfg
        with _reading(cfg.name):
            ledger = self.src.ledger(pipeline)
            lag = queries.lag_history(ledger, cfg.name, max(points, health.GROWING_RUNS + 1))
            out = self.overview(pipeline, lag)
            out["lag_history"] = lag[-points:]
            out["gaps"] = queries.gap_rows(ledger, cfg.name)
            out["events"] = queries.event_rows(ledger, cfg.name, EVENTS, window=queries.EVENT_WINDOW)
            out["page"] = queries.batch_page(ledger, cfg.name, before, limit)
        locate(pipeline, out["page"]["batches"])
        queries.mark_gaps(out["page"]["batches"], out["gaps"])
        return out

    def latest(self, pipeline: Pipeline, points: int = POINTS) -> dict:
        """The pipeline's JSON answer: ``detail`` with the newest batches as ``last_batches``."""
        out = self.detail(pipeline, None, LAST_BATCHES, points)
        out["last_batches"] = out.pop("page")["batches"]
        return out

    def batches(self, pipeline: Pipeline, before: int | None = None, limit: int = PAGE) -> dict:
        """One page of batch history (``queries.batch_page``), batches following a gap flagged."""
        with _reading(pipeline.name):
            ledger = self.src.ledger(pipeline)
            page = queries.batch_page(ledger, pipeline.name, before, limit)
            queries.mark_gaps(page["batches"], queries.gap_rows(ledger, pipeline.name))
        return page

    def lag(self, pipeline: Pipeline, points: int = POINTS) -> dict:
        with _reading(pipeline.name):
            return {"pipeline": pipeline.name,
                    "points": queries.lag_history(self.src.ledger(pipeline), pipeline.name, points)}

    def run_batches(self, dag_id: str, run_id: str) -> tuple[Pipeline | None, list[dict]]:
        """The batches a DAG run planned, located. ``(None, [])`` for a DAG id no pipeline has: the
        run tab is on every DAG's runs."""
        pipeline = self.src.by_dag_id(dag_id)
        if pipeline is None:
            return None, []
        if not self.may_read(pipeline, True):
            raise Forbidden(f"you may not read runs of DAG {dag_id}")
        with _reading(pipeline.name):
            found = queries.batches_for_run(self.src.ledger(pipeline), pipeline.name, run_id)
        return pipeline, locate(pipeline, found)

    def run(self, dag_id: str, run_id: str) -> dict:
        """The run's JSON answer; ``NotFound`` for a DAG id no pipeline has."""
        pipeline, batches = self.run_batches(dag_id, run_id)
        if pipeline is None:
            raise NotFound(f"no offsetbatch pipeline has DAG id '{dag_id}'")
        return {"pipeline": pipeline.name, "dag_id": dag_id, "run_id": run_id, "batches": batches}


def locate(pipeline: Pipeline, batches: list[dict]) -> list[dict]:
    """Where each batch's output and rejected records are, as the pipeline's sink says at the sink
    path the batch was planned with (a batch planned before the path changed is still found)."""
    cfg = pipeline.cfg
    by_path: dict[str | None, list[dict]] = {}
    for b in batches:
        by_path.setdefault(b.pop("output_path", None), []).append(b)
    for path, group in by_path.items():
        if not path:
            sink = None
        elif path == cfg.sink.root:
            sink = pipeline.sink
        else:
            sink = sink_for(cfg.name, cfg.sink.with_root(path))
        found = sink.locations_of([b["output_id"] for b in group]) if sink else {}
        for b in group:
            where = found.get(b["output_id"], {})
            b["output"] = where.get("data") or where.get("output")
            b["rejected_output"] = where.get("rejected")
    return batches


@contextmanager
def _reading(name: str) -> Iterator[None]:
    """A ledger that is missing, unreachable or damaged is ``Unavailable`` naming the pipeline, not
    a traceback in the server log only."""
    try:
        yield
    except (LedgerError, sa.exc.SQLAlchemyError) as exc:
        log.warning("pipeline %s: cannot read its ledger: %s", name, redact.url(str(exc)))
        raise Unavailable(f"pipeline {name}: cannot read its ledger: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
