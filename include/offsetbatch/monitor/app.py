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

from typing import Annotated

from airflow.api_fastapi.core_api.security import GetUserDep as User
from airflow.api_fastapi.core_api.security import get_user
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from offsetbatch import redact
from offsetbatch.ledger import queries
from offsetbatch.monitor import chart
from offsetbatch.monitor.pages import (MAX_POINTS, PAGE, POINTS, Forbidden, NotFound, PageError,
                                       Pages, Unavailable)
from offsetbatch.monitor.sources import Sources
from offsetbatch.monitor.views import render
from offsetbatch.pipeline import Pipeline

MAX_BATCH_ID = 2**63 - 1  # ob_batches.batch_id is a BIGINT: a larger ``before`` cannot be a batch id
# What a query parameter must be, for the 422 message (FastAPI's own wording names only the bound).
PARAMETERS = {"before": "a batch id, a positive 64-bit integer (pass next_before of the previous page)",
              "limit": f"a page size from 1 to {queries.MAX_PAGE}", "points": f"a number of points from 1 to {MAX_POINTS}"}
STATUS = {NotFound: 404, Forbidden: 403, Unavailable: 503}

Before = Annotated[int | None, Query(ge=1, le=MAX_BATCH_ID)]
Limit = Annotated[int, Query(ge=1, le=queries.MAX_PAGE)]
Points = Annotated[int, Query(ge=1, le=MAX_POINTS)]


def _may_read(user, pipeline: Pipeline, runs: bool = False) -> bool:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    return get_auth_manager().is_authorized_dag(method="GET", user=user, details=DagDetails(id=pipeline.cfg.dag_id),
                                                access_entity=DagAccessEntity.RUN if runs else None)


def _pages(request: Request, user: User) -> Pages:
    """The pages as this request's user may see them."""
    return Pages(request.app.state.sources, lambda pipeline, runs: _may_read(user, pipeline, runs))


Site = Annotated[Pages, Depends(_pages)]
router = APIRouter()


def create_app(sources: Sources | None = None) -> FastAPI:
    app = FastAPI(title="offsetbatch", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(get_user)])
    app.state.sources = sources or Sources()
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(PageError, _page_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.include_router(router)
    return app


async def _http_error(request: Request, exc: HTTPException):
    if exc.status_code == 401 and "/api/" not in request.url.path:
        from airflow.api_fastapi.app import get_auth_manager

        return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)
    return _error(request, exc.status_code, exc.detail)


async def _page_error(request: Request, exc: PageError):
    return _error(request, STATUS.get(type(exc), 500), str(exc))


async def _invalid(request: Request, exc: RequestValidationError):
    """422 with one sentence per bad parameter instead of FastAPI's list (a page shows it as text)."""
    return _error(request, 422, invalid_parameters(exc.errors()))


def _base(request: Request) -> str:
    return request.scope.get("root_path", "").rstrip("/")


def _airflow_root(request: Request) -> str:
    root = _base(request)
    return root[: -len("/offsetbatch")] if root.endswith("/offsetbatch") else ""


# ---- pages --------------------------------------------------------------------------------


@router.get("/", response_class=HTMLResponse)
def pipelines_page(request: Request, site: Site):
    listing = site.pipelines()
    return render("pipelines.html", rows=listing["pipelines"], errors=listing["errors"], base=_base(request),
                  configured=len(site.installed()))


@router.get("/pipelines/{name}", response_class=HTMLResponse)
def pipeline_page(request: Request, name: str, site: Site, before: Before = None, limit: Limit = PAGE):
    pipeline = site.pipeline(name)
    d = site.detail(pipeline, before, limit, POINTS)
    return render("pipeline.html", cfg=pipeline.cfg, base=_base(request), airflow=_airflow_root(request),
                  chart=chart.lag_svg(d["lag_history"], d["gaps"]), event_window=queries.EVENT_WINDOW, **d)


@router.get("/dags/{dag_id}", response_class=HTMLResponse)
def dag_tab(request: Request, dag_id: str, site: Site):
    return RedirectResponse(f"{_base(request)}/pipelines/{site.pipeline_of_dag(dag_id).name}", status_code=303)


@router.get("/runs/{dag_id}/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, dag_id: str, run_id: str, site: Site):
    """The run tab. A DAG that is not a pipeline gets a 404 whose page still explains itself in
    one line (Airflow shows this tab on the runs of every DAG)."""
    pipeline, batches = site.run_batches(dag_id, run_id)
    html = render("run.html", cfg=pipeline.cfg if pipeline else None, dag_id=dag_id, run_id=run_id, batches=batches,
                  base=_base(request))
    return HTMLResponse(html, status_code=200 if pipeline else 404)


# ---- JSON API -----------------------------------------------------------------------------


@router.get("/api/pipelines")
def api_pipelines(site: Site) -> dict:
    return site.pipelines()


@router.get("/api/pipelines/{name}")
def api_pipeline(name: str, site: Site, points: Points = POINTS) -> dict:
    return site.latest(site.pipeline(name), points)


@router.get("/api/pipelines/{name}/batches")
def api_batches(name: str, site: Site, before: Before = None, limit: Limit = PAGE) -> dict:
    return site.batches(site.pipeline(name), before, limit)


@router.get("/api/pipelines/{name}/lag")
def api_lag(name: str, site: Site, points: Points = POINTS) -> dict:
    return site.lag(site.pipeline(name), points)


@router.get("/api/runs/{dag_id}/{run_id}")
def api_run(dag_id: str, run_id: str, site: Site) -> dict:
    return site.run(dag_id, run_id)


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
    """``{"detail": ...}`` for the API; for a page, the base page with the sentence (a URL's password
    or secret parameter masked, whoever wrote it)."""
    detail = redact.url(detail) if isinstance(detail, str) else detail
    if "/api/" in request.url.path:
        return JSONResponse({"detail": detail}, status_code=status)
    return HTMLResponse(render("base.html").replace("</body>", f'<p id="error">{_esc(detail)}</p></body>'),
                        status_code=status)


def _esc(text) -> str:
    from html import escape

    return escape(str(text))
