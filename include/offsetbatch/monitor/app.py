"""The FastAPI app the Airflow plugin mounts at ``/offsetbatch``: HTML pages for the UI's
``external_views`` and the JSON API behind them (``docs/ui.md``).

Every route needs an Airflow login (docs/architecture.md, Airflow facts the code relies on: plugin routes are not authenticated by default):
the app-wide dependency resolves the user from the ``Authorization: Bearer`` header or the UI's
session cookie through Airflow's own ``get_user``; a pipeline is shown only to users who may read
its DAG. An unauthenticated page request is sent to Airflow's login page; an API request gets 401.

Errors are one sentence naming the pipeline or DAG (``{"detail": "..."}`` for the API, a short page
otherwise). They never show server paths to a user who only guessed a name: an unknown pipeline or
DAG is a 404 that says how many pipelines are configured, not where. A pipeline's ledger that cannot
be read is a 503 naming the pipeline (the other pipelines' pages keep working).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Annotated, Iterator

import sqlalchemy as sa
from airflow.api_fastapi.core_api.security import GetUserDep as User
from airflow.api_fastapi.core_api.security import get_user
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from offsetbatch.config import ConfigError, PipelineConfig
from offsetbatch.ledger import LedgerError, queries
from offsetbatch.monitor import chart, health
from offsetbatch.monitor.sources import Sources
from offsetbatch.monitor.views import render
from offsetbatch.sinks import sink_for

log = logging.getLogger(__name__)
PAGE = 50
EVENTS = 20  # audit events on the pipeline page and in its API answer
MAX_BATCH_ID = 2**63 - 1  # ob_batches.batch_id is a BIGINT: a larger ``before`` cannot be a batch id
# What a query parameter must be, for the 422 message (FastAPI's own wording names only the bound).
PARAMETERS = {"before": "a batch id, a positive 64-bit integer (pass next_before of the previous page)",
              "limit": f"a page size from 1 to {queries.MAX_PAGE}", "points": "a number of points from 1 to 2000"}


def _may_read(user, cfg: PipelineConfig, runs: bool = False) -> bool:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    return get_auth_manager().is_authorized_dag(method="GET", user=user, details=DagDetails(id=cfg.dag_id),
                                                access_entity=DagAccessEntity.RUN if runs else None)


def _locate(cfg: PipelineConfig, batches: list[dict]) -> list[dict]:
    """Where each batch's output and rejected records are, as the pipeline's sink says (at the sink
    path the batch was planned with)."""
    by_path: dict[str, list[dict]] = {}
    for b in batches:
        path = b.pop("output_path", None)
        by_path.setdefault(path, []).append(b)
    for path, group in by_path.items():
        sink = sink_for(cfg.name, cfg.sink.model_copy(update={"path": path})) if path else None
        found = sink.locations_of([b["output_id"] for b in group]) if sink else {}
        for b in group:
            where = found.get(b["output_id"], {})
            b["output"] = where.get("data") or where.get("output")
            b["rejected_output"] = where.get("rejected")
    return batches


def create_app(sources: Sources | None = None) -> FastAPI:
    src = sources or Sources()
    app = FastAPI(title="offsetbatch", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(get_user)])

    @app.exception_handler(HTTPException)
    async def _errors(request: Request, exc: HTTPException):
        if exc.status_code == 401 and "/api/" not in request.url.path:
            from airflow.api_fastapi.app import get_auth_manager

            return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)
        return _error(request, exc.status_code, exc.detail)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        """422 with one sentence per bad parameter instead of FastAPI's list (a page shows it as text)."""
        return _error(request, 422, invalid_parameters(exc.errors()))

    def base(request: Request) -> str:
        return request.scope.get("root_path", "").rstrip("/")

    def airflow_root(request: Request) -> str:
        root = base(request)
        return root[: -len("/offsetbatch")] if root.endswith("/offsetbatch") else ""

    def pipelines() -> dict[str, PipelineConfig]:
        try:
            return src.pipelines()
        except ConfigError as exc:
            raise HTTPException(500, f"the pipeline configs (OFFSETBATCH_PIPELINES) are invalid: {exc}") from None

    def pipeline(name: str, user) -> PipelineConfig:
        configs = pipelines()
        cfg = configs.get(name)
        if cfg is None:
            raise HTTPException(404, f"no pipeline '{name}': {len(configs)} pipeline(s) are configured "
                                     f"(OFFSETBATCH_PIPELINES); the Pipelines page lists those you may read")
        if not _may_read(user, cfg):
            raise HTTPException(403, f"you may not read DAG {cfg.dag_id} (pipeline {name})")
        return cfg

    @contextmanager
    def ledger_read(cfg: PipelineConfig) -> Iterator[None]:
        """A ledger that is missing, unreachable or damaged answers 503 naming the pipeline, not a
        500 with a traceback in the server log only."""
        try:
            yield
        except (LedgerError, sa.exc.SQLAlchemyError) as exc:
            log.warning("pipeline %s: cannot read its ledger: %s", cfg.name, exc)
            raise HTTPException(503, f"pipeline {cfg.name}: cannot read its ledger: {_one_line(exc)}") from None

    def overview(cfg: PipelineConfig, lag: list[dict] | None = None) -> dict:
        """``lag``: the lag history when the caller already has it (the rules need the last few points)."""
        ledger = src.ledger(cfg)
        status = src.status(cfg, ledger)
        summary = queries.summary(ledger, cfg.name)
        if lag is None:
            lag = queries.lag_history(ledger, cfg.name, points=health.GROWING_RUNS + 1)
        state, findings = health.assess(status, summary, lag)
        lag_seconds = max((p["lag_seconds"] or 0 for p in status["partitions"]), default=0) \
            if all(p["lag_seconds"] is not None for p in status["partitions"]) else None
        return {"name": cfg.name, "dag_id": cfg.dag_id, "state": state, "findings": health.as_dicts(findings),
                "lag_seconds": lag_seconds, "status": status, "summary": summary}

    def all_overviews(user) -> tuple[list[dict], list[str]]:
        rows, errors = [], []
        for cfg in pipelines().values():
            if not _may_read(user, cfg):
                continue
            try:
                rows.append(overview(cfg))
            except Exception as exc:  # noqa: BLE001 - one broken ledger must not hide the others
                if isinstance(exc, LedgerError):  # missing or unreachable: the message says it all
                    log.warning("pipeline %s: cannot read its ledger: %s", cfg.name, exc)
                else:
                    log.exception("pipeline %s: overview failed", cfg.name)
                errors.append(f"pipeline {cfg.name}: cannot read its ledger: {type(exc).__name__}: {_one_line(exc)}")
        return rows, errors

    def detail(cfg: PipelineConfig, before: int | None, limit: int, points: int) -> dict:
        with ledger_read(cfg):
            ledger = src.ledger(cfg)
            lag = queries.lag_history(ledger, cfg.name, max(points, health.GROWING_RUNS + 1))
            out = overview(cfg, lag)
            out["lag_history"] = lag[-points:]
            out["gaps"] = queries.gap_rows(ledger, cfg.name)
            out["events"] = queries.event_rows(ledger, cfg.name, EVENTS, window=queries.EVENT_WINDOW)
            out["page"] = queries.batch_page(ledger, cfg.name, before, limit)
        _locate(cfg, out["page"]["batches"])
        queries.mark_gaps(out["page"]["batches"], out["gaps"])
        return out

    def run_view(dag_id: str, run_id: str, user) -> tuple[PipelineConfig | None, list[dict]]:
        """``(None, [])`` for a DAG id no pipeline has: the run tab is on every DAG's runs."""
        cfg = src.by_dag_id(dag_id)
        if cfg is None:
            return None, []
        if not _may_read(user, cfg, runs=True):
            raise HTTPException(403, f"you may not read runs of DAG {dag_id}")
        with ledger_read(cfg):
            return cfg, _locate(cfg, queries.batches_for_run(src.ledger(cfg), cfg.name, run_id))

    # ---- pages ----------------------------------------------------------------------------

    @app.get("/", response_class=HTMLResponse)
    def pipelines_page(request: Request, user: User):
        rows, errors = all_overviews(user)
        return render("pipelines.html", rows=rows, errors=errors, base=base(request), configured=len(pipelines()))

    @app.get("/pipelines/{name}", response_class=HTMLResponse)
    def pipeline_page(request: Request, name: str, user: User,
                      before: Annotated[int | None, Query(ge=1, le=MAX_BATCH_ID)] = None,
                      limit: Annotated[int, Query(ge=1, le=queries.MAX_PAGE)] = PAGE):
        cfg = pipeline(name, user)
        d = detail(cfg, before, limit, 200)
        return render("pipeline.html", cfg=cfg, base=base(request), airflow=airflow_root(request),
                      chart=chart.lag_svg(d["lag_history"], d["gaps"]), event_window=queries.EVENT_WINDOW, **d)

    @app.get("/dags/{dag_id}", response_class=HTMLResponse)
    def dag_tab(request: Request, dag_id: str, user: User):
        cfg = src.by_dag_id(dag_id)
        if cfg is None:
            raise HTTPException(404, f"no offsetbatch pipeline has DAG id {dag_id}: this tab shows offsetbatch "
                                     f"pipelines only")
        return RedirectResponse(f"{base(request)}/pipelines/{cfg.name}", status_code=303)

    @app.get("/runs/{dag_id}/{run_id}", response_class=HTMLResponse)
    def run_page(request: Request, dag_id: str, run_id: str, user: User):
        """The run tab. A DAG that is not a pipeline gets a 404 whose page still explains itself in
        one line (Airflow shows this tab on the runs of every DAG)."""
        cfg, batches = run_view(dag_id, run_id, user)
        html = render("run.html", cfg=cfg, dag_id=dag_id, run_id=run_id, batches=batches, base=base(request))
        return HTMLResponse(html, status_code=200 if cfg else 404)

    # ---- JSON API -------------------------------------------------------------------------

    @app.get("/api/pipelines")
    def api_pipelines(user: User) -> dict:
        rows, errors = all_overviews(user)
        return {"pipelines": rows, "errors": errors}

    @app.get("/api/pipelines/{name}")
    def api_pipeline(name: str, user: User, points: Annotated[int, Query(ge=1, le=2000)] = 200) -> dict:
        cfg = pipeline(name, user)
        d = detail(cfg, None, 10, points)
        d["last_batches"] = d.pop("page")["batches"]
        return d

    @app.get("/api/pipelines/{name}/batches")
    def api_batches(name: str, user: User, before: Annotated[int | None, Query(ge=1, le=MAX_BATCH_ID)] = None,
                    limit: Annotated[int, Query(ge=1, le=queries.MAX_PAGE)] = PAGE) -> dict:
        cfg = pipeline(name, user)
        with ledger_read(cfg):
            page = queries.batch_page(src.ledger(cfg), cfg.name, before, limit)
            queries.mark_gaps(page["batches"], queries.gap_rows(src.ledger(cfg), cfg.name))
        return page

    @app.get("/api/pipelines/{name}/lag")
    def api_lag(name: str, user: User, points: Annotated[int, Query(ge=1, le=2000)] = 200) -> dict:
        cfg = pipeline(name, user)
        with ledger_read(cfg):
            return {"pipeline": name, "points": queries.lag_history(src.ledger(cfg), cfg.name, points)}

    @app.get("/api/runs/{dag_id}/{run_id}")
    def api_run(dag_id: str, run_id: str, user: User) -> dict:
        cfg, batches = run_view(dag_id, run_id, user)
        if cfg is None:
            raise HTTPException(404, f"no offsetbatch pipeline has DAG id '{dag_id}'")
        return {"pipeline": cfg.name, "dag_id": dag_id, "run_id": run_id, "batches": batches}

    return app


def invalid_parameters(errors: list[dict]) -> str:
    """FastAPI's validation errors as one sentence per parameter, saying what a valid value is."""
    out = []
    for err in errors:
        loc = [str(x) for x in err.get("loc", ())]
        where, name = (loc[0], loc[-1]) if len(loc) > 1 else ("parameter", loc[-1] if loc else "?")
        given = f" = {err['input']!r}" if err.get("input") is not None else ""
        why = f"must be {PARAMETERS[name]}" if name in PARAMETERS else err.get("msg", "invalid")
        out.append(f"invalid {where} parameter '{name}'{given}: {why}")
    return "; ".join(out) or "invalid request"


def _error(request: Request, status: int, detail) -> HTMLResponse | JSONResponse:
    """``{"detail": ...}`` for the API; for a page, the base page with the sentence."""
    if "/api/" in request.url.path:
        return JSONResponse({"detail": detail}, status_code=status)
    return HTMLResponse(render("base.html").replace("</body>", f'<p id="error">{_esc(detail)}</p></body>'),
                        status_code=status)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _esc(text) -> str:
    from html import escape

    return escape(str(text))
