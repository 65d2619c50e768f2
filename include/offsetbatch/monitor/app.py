"""The FastAPI app the Airflow plugin mounts at ``/offsetbatch``: HTML pages for the UI's
``external_views`` and the JSON API behind them (``docs/ui.md``).

Every route needs an Airflow login (docs/architecture.md, Airflow facts the code relies on: plugin routes are not authenticated by default):
the app-wide dependency resolves the user from the ``Authorization: Bearer`` header or the UI's
session cookie through Airflow's own ``get_user``; a pipeline is shown only to users who may read
its DAG. An unauthenticated page request is sent to Airflow's login page; an API request gets 401.
"""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from airflow.api_fastapi.core_api.security import GetUserDep as User
from airflow.api_fastapi.core_api.security import get_user

from offsetbatch.config import ConfigError, PipelineConfig
from offsetbatch.ledger import queries
from offsetbatch.monitor import chart, health
from offsetbatch.monitor.sources import Sources
from offsetbatch.monitor.views import render
from offsetbatch.sinks import sink_for

log = logging.getLogger(__name__)
PAGE = 50


def _may_read(user, cfg: PipelineConfig, runs: bool = False) -> bool:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    return get_auth_manager().is_authorized_dag(method="GET", user=user, details=DagDetails(id=cfg.dag_id),
                                                access_entity=DagAccessEntity.RUN if runs else None)


def _locate(cfg: PipelineConfig, batches: list[dict]) -> list[dict]:
    """Where each batch's output and rejected records are, as the pipeline's sink says (at the sink
    path the batch was planned with)."""
    for b in batches:
        path = b.pop("output_path", None)
        where = sink_for(cfg.name, cfg.sink.model_copy(update={"path": path})).locations(b["output_id"]) if path else {}
        b["output"] = where.get("data") or where.get("output")
        b["rejected_output"] = where.get("rejected")
    return batches


def create_app(sources: Sources | None = None) -> FastAPI:
    src = sources or Sources()
    app = FastAPI(title="offsetbatch", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(get_user)])

    @app.exception_handler(HTTPException)
    async def _errors(request: Request, exc: HTTPException):
        api = "/api/" in request.url.path
        if exc.status_code == 401 and not api:
            from airflow.api_fastapi.app import get_auth_manager

            return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)
        if api:
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)
        return HTMLResponse(render("base.html").replace("</body>", f"<p>{_esc(exc.detail)}</p></body>"),
                            status_code=exc.status_code)

    def base(request: Request) -> str:
        return request.scope.get("root_path", "").rstrip("/")

    def airflow_root(request: Request) -> str:
        root = base(request)
        return root[: -len("/offsetbatch")] if root.endswith("/offsetbatch") else ""

    def pipelines() -> dict[str, PipelineConfig]:
        try:
            return src.pipelines()
        except ConfigError as exc:
            raise HTTPException(500, f"pipeline configs in {src.spec}: {exc}") from None

    def pipeline(name: str, user) -> PipelineConfig:
        cfg = pipelines().get(name)
        if cfg is None:
            raise HTTPException(404, f"no pipeline '{name}' in {src.spec} (OFFSETBATCH_PIPELINES)")
        if not _may_read(user, cfg):
            raise HTTPException(403, f"you may not read DAG {cfg.dag_id} (pipeline {name})")
        return cfg

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
                log.exception("pipeline %s: overview failed", cfg.name)
                errors.append(f"pipeline {cfg.name}: cannot read its ledger: {type(exc).__name__}: {exc}")
        return rows, errors

    def detail(cfg: PipelineConfig, before: int | None, limit: int, points: int) -> dict:
        ledger = src.ledger(cfg)
        lag = queries.lag_history(ledger, cfg.name, max(points, health.GROWING_RUNS + 1))
        out = overview(cfg, lag)
        out["lag_history"] = lag[-points:]
        out["gaps"] = queries.gap_rows(ledger, cfg.name)
        out["page"] = queries.batch_page(ledger, cfg.name, before, limit)
        _locate(cfg, out["page"]["batches"])
        queries.mark_gaps(out["page"]["batches"], out["gaps"])
        return out

    def run_view(dag_id: str, run_id: str, user) -> tuple[PipelineConfig | None, list[dict]]:
        cfg = src.by_dag_id(dag_id)
        if cfg is None:
            return None, []
        if not _may_read(user, cfg, runs=True):
            raise HTTPException(403, f"you may not read runs of DAG {dag_id}")
        return cfg, _locate(cfg, queries.batches_for_run(src.ledger(cfg), cfg.name, run_id))

    # ---- pages ----------------------------------------------------------------------------

    @app.get("/", response_class=HTMLResponse)
    def pipelines_page(request: Request, user: User):
        rows, errors = all_overviews(user)
        return render("pipelines.html", rows=rows, errors=errors, base=base(request), spec=src.spec)

    @app.get("/pipelines/{name}", response_class=HTMLResponse)
    def pipeline_page(request: Request, name: str, user: User, before: int | None = None,
                      limit: Annotated[int, Query(ge=1, le=queries.MAX_PAGE)] = PAGE):
        cfg = pipeline(name, user)
        d = detail(cfg, before, limit, 200)
        return render("pipeline.html", cfg=cfg, base=base(request), airflow=airflow_root(request),
                      chart=chart.lag_svg(d["lag_history"], d["gaps"]), **d)

    @app.get("/dags/{dag_id}", response_class=HTMLResponse)
    def dag_tab(request: Request, dag_id: str, user: User):
        cfg = src.by_dag_id(dag_id)
        if cfg is None:
            raise HTTPException(404, f"DAG {dag_id} is not an offsetbatch pipeline (no config in {src.spec})")
        return RedirectResponse(f"{base(request)}/pipelines/{cfg.name}", status_code=303)

    @app.get("/runs/{dag_id}/{run_id}", response_class=HTMLResponse)
    def run_page(request: Request, dag_id: str, run_id: str, user: User):
        cfg, batches = run_view(dag_id, run_id, user)
        return render("run.html", cfg=cfg, dag_id=dag_id, run_id=run_id, batches=batches, base=base(request),
                      spec=src.spec)

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
    def api_batches(name: str, user: User, before: int | None = None,
                    limit: Annotated[int, Query(ge=1, le=queries.MAX_PAGE)] = PAGE) -> dict:
        cfg = pipeline(name, user)
        page = queries.batch_page(src.ledger(cfg), cfg.name, before, limit)
        queries.mark_gaps(page["batches"], queries.gap_rows(src.ledger(cfg), cfg.name))
        return page

    @app.get("/api/pipelines/{name}/lag")
    def api_lag(name: str, user: User, points: Annotated[int, Query(ge=1, le=2000)] = 200) -> dict:
        cfg = pipeline(name, user)
        return {"pipeline": name, "points": queries.lag_history(src.ledger(cfg), cfg.name, points)}

    @app.get("/api/runs/{dag_id}/{run_id}")
    def api_run(dag_id: str, run_id: str, user: User) -> dict:
        cfg, batches = run_view(dag_id, run_id, user)
        if cfg is None:
            raise HTTPException(404, f"DAG {dag_id} is not an offsetbatch pipeline (no config in {src.spec})")
        return {"pipeline": cfg.name, "dag_id": dag_id, "run_id": run_id, "batches": batches}

    return app


def _esc(text) -> str:
    from html import escape

    return escape(str(text))
