"""Airflow connections as offsetbatch reads them: the one place that asks Airflow for one, so that
a connection that is not defined, or whose extra is not JSON, is a clear ``ConfigError`` naming the
connection and the pipeline field that names it (no retry fixes either), never a raw
``AirflowNotFoundException`` that the task retries, nor Airflow's silent ``{}`` for a broken extra
(which would drop every setting in it: a TLS or SASL connection would quietly become PLAINTEXT)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from offsetbatch.errors import ConfigError

if TYPE_CHECKING:
    from airflow.sdk import Connection


def get_connection(conn_id: str, field: str) -> "Connection":
    """Airflow connection ``conn_id``, named by the config field ``field`` (``kafka.conn_id``)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise ConfigError(f"{field}: Airflow connection '{conn_id}' is not defined. Define it (the Airflow UI, "
                          f"AIRFLOW_CONN_{conn_id.upper()} as JSON, or your secrets backend), or fix {field}.") from None
    if conn.extra:
        try:
            parsed = json.loads(conn.extra)
        except ValueError as exc:
            raise ConfigError(f"{field}: the extra of Airflow connection '{conn_id}' is not valid JSON ({exc}); none of "
                              f"its settings would be used. Fix the connection's extra.") from None
        if not isinstance(parsed, dict):
            raise ConfigError(f"{field}: the extra of Airflow connection '{conn_id}' must be a JSON object, got "
                              f"{type(parsed).__name__}. Fix the connection's extra.")
    return conn
