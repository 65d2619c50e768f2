"""Opening a Delta table with delta-rs: its URI as delta-rs names it, the object store's settings
from the sink's Airflow connection, and a table that does not exist yet as ``None``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from offsetbatch import storage

if TYPE_CHECKING:
    from deltalake import DeltaTable, PostCommitHookProperties

    from offsetbatch.sinks.delta.settings import DeltaSettings


def delta_uri(location: str) -> str:
    """delta-rs knows ``s3://``, not Hadoop's ``s3a://``; a local path stays a path."""
    return "s3://" + location.partition("://")[2] if location.startswith("s3a://") else location


def storage_options(settings: "DeltaSettings") -> dict[str, str] | None:
    """delta-rs's object-store settings from the sink's connection (``None`` on a disk). Commits on
    S3 use conditional writes (``If-None-Match``), so two writers never both create one log entry."""
    if not settings.storage_conn_id or not storage.is_s3(settings.table):
        return None
    from offsetbatch.storage.s3 import S3Settings

    s3 = S3Settings.from_connection(settings.storage_conn_id)
    options = {"AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": s3.secret_key, "AWS_REGION": s3.region,
               "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": str(not s3.path_style).lower(),
               "AWS_S3_ALLOW_UNSAFE_RENAME": "false", "conditional_put": "etag"}
    if s3.session_token:
        options["AWS_SESSION_TOKEN"] = s3.session_token
    if s3.endpoint:
        options["AWS_ENDPOINT_URL"] = s3.endpoint
        options["AWS_ALLOW_HTTP"] = str(s3.endpoint.startswith("http://")).lower()
    return options


# Set on every table the sink creates: delta-rs would otherwise delete log entries past
# ``delta.logRetentionDuration`` after any commit that writes a checkpoint, before maintenance has
# archived the batch markers they hold (``markers``, *The archive*). Only maintenance cleans the log.
CONFIGURATION = {"delta.enableExpiredLogCleanup": "false"}


def hooks() -> "PostCommitHookProperties":
    """What every commit of the sink runs after it: a checkpoint every 100 versions, never a log
    cleanup (``CONFIGURATION``; a table created before it had no such property)."""
    from deltalake import PostCommitHookProperties

    return PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)


def open_table(location: str, options: dict[str, str] | None) -> "DeltaTable | None":
    """The table at ``location``, or ``None`` before its first commit."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(delta_uri(location), storage_options=options)
    except TableNotFoundError:
        return None


class TableOwner(Protocol):
    """What upsert and maintenance use of the sink (``DeltaSink``), without importing it."""

    pipeline_name: str
    settings: "DeltaSettings"

    @property
    def options(self) -> dict[str, str] | None: ...

    def open(self, location: str) -> "DeltaTable | None": ...
