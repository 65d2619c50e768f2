"""``offsetbatch doctor``'s OpenLineage check: does the configured HTTP transport answer, and what
does a transport that does not cost each run?

Airflow's OpenLineage provider emits a start and an end event per task and per DAG run (eight per
pipeline run) and makes the run wait for each: at most ``[openlineage] execution_timeout`` seconds (10 by default),
while the HTTP transport itself waits ``timeout`` (5 s) per try, for up to 1 + ``retry.total`` (5)
tries with backoff. A transport that refuses or never answers therefore adds up to a minute to
every run without failing anything: the run is green and slow, and nothing says why. This check
says it before the first run (measured figures and the settings that bound it: README,
"OpenLineage").
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

PROBE_CONNECT_S = 2.0
PROBE_READ_S = 3.0
EVENTS_PER_RUN = 8  # start and end of plan, spark_job, commit and of the DAG run
TERMINATE_WAIT_S = 3  # the provider's grace before it kills an emission that outlived execution_timeout
DEFAULT_RETRIES = 5  # openlineage-python's DEFAULT_RETRY_CONFIG["total"]
DEFAULT_TIMEOUT_S = 5.0
DEFAULT_EXECUTION_TIMEOUT_S = 10


@dataclass(frozen=True)
class TransportBound:
    """What one task event can wait for a transport that never answers, from the settings."""

    execution_timeout: int
    timeout: float
    retries: int

    @property
    def per_event(self) -> float:
        transport = self.timeout * (1 + self.retries)  # backoff left out: execution_timeout caps it anyway
        return min(transport, self.execution_timeout + TERMINATE_WAIT_S)

    def describe(self) -> str:
        return (f"each of a run's {EVENTS_PER_RUN} lineage events (start and end of each task and of the DAG run) waits "
                f"at most {self.per_event:.0f} s for a transport "
                f"that does not answer (timeout {self.timeout:g} s x {1 + self.retries} tries, cut at "
                f"[openlineage] execution_timeout {self.execution_timeout} s): up to "
                f"{self.per_event * EVENTS_PER_RUN:.0f} s per run")


def _http_url(transport: dict) -> str | None:
    if transport.get("type") == "http" and transport.get("url"):
        return transport["url"].rstrip("/") + "/" + str(transport.get("endpoint", "api/v1/lineage")).lstrip("/")
    return os.environ.get("OPENLINEAGE_URL") if not transport else None


def bound_of(transport: dict, execution_timeout: int) -> TransportBound:
    retry = transport.get("retry") or {}
    retries = int(retry.get("total", DEFAULT_RETRIES))  # the client merges a partial retry with its defaults
    return TransportBound(execution_timeout, float(transport.get("timeout", DEFAULT_TIMEOUT_S)), retries)


def probe(url: str, bound: TransportBound) -> str:
    """One HEAD request: any HTTP answer (even 405) means the transport is there."""
    import requests

    from offsetbatch import redact

    started = time.monotonic()
    try:
        answer = requests.head(url, timeout=(PROBE_CONNECT_S, PROBE_READ_S), allow_redirects=False)
    except requests.Timeout as exc:
        what = ("accepted the connection and sent nothing" if isinstance(exc, requests.ReadTimeout)
                else "did not accept a connection")
        raise RuntimeError(
            f"the OpenLineage transport {redact.url(url)} {what} within "
            f"{PROBE_READ_S if isinstance(exc, requests.ReadTimeout) else PROBE_CONNECT_S:g} s: runs stay green but "
            f"slow, because {bound.describe()}") from None
    except requests.ConnectionError as exc:
        reason = str(exc.args[0] if exc.args else exc)
        reason = "connection refused" if "refused" in reason.lower() else reason[:200]
        raise RuntimeError(
            f"the OpenLineage transport {redact.url(url)} cannot be reached ({reason}): runs stay green but slow, "
            f"because {bound.describe()}") from None
    return (f"{redact.url(url)} answers (HTTP {answer.status_code} in {(time.monotonic() - started) * 1000:.0f} ms); "
            f"if it stopped answering, {bound.describe()}")


def check() -> str:
    """The doctor's line: installed? enabled? which transport, and does it answer?"""
    try:
        from airflow.providers.openlineage import conf as ol_conf
    except ImportError:
        return "the OpenLineage provider is not installed: no lineage is emitted"
    if ol_conf.is_disabled():
        return "OpenLineage is disabled ([openlineage] disabled, or no transport configured)"
    transport = ol_conf.transport() or {}
    url = _http_url(transport)
    if url is None:
        kind = transport.get("type") or ("a config file" if ol_conf.config_path() else "unknown")
        return f"transport {kind}: not probed (only an HTTP transport is)"
    return probe(url, bound_of(transport, ol_conf.execution_timeout()))


FIX = ("correct the transport's url in AIRFLOW__OPENLINEAGE__TRANSPORT, or bound what a lineage backend that is down "
       "costs: AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT=3 and a transport timeout of 1 s with retry.total 1 (README, "
       "'OpenLineage'); or turn it off with AIRFLOW__OPENLINEAGE__DISABLED=True")
