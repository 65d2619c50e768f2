"""File operations on a sink's folders through fsspec, on a local disk, HDFS, or an object store.

Local paths and ``file://`` use fsspec's local filesystem. ``s3a://`` and ``s3://`` locations
(``storage.s3``) use pyarrow's S3 filesystem, wrapped for fsspec, with the settings of the
pipeline's Airflow ``aws`` connection: ``register_s3`` binds a bucket to them once per process
(the Spark job, from its secrets file), or ``bind_s3`` names the connection to read on first
use (the pipeline's tasks and the CLI, where Airflow's connections are; never at DAG parse time). An object store has no rename: ``renames_are_cheap``
tells publishing code whether moving a folder is a rename or a copy of every object in it.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any, Iterator

import fsspec

from offsetbatch.errors import StorageConnectionError
from offsetbatch.storage.locations import bucket_of, is_s3, renames_are_cheap, scheme

_s3_buckets: dict[str, Any] = {}  # bucket -> fsspec filesystem (register_s3)
_s3_connections: dict[str, str] = {}  # bucket -> Airflow connection id, read on first use (bind_s3)


def register_s3(bucket: str, filesystem: Any) -> None:
    """Serve ``s3a://bucket/...`` and ``s3://bucket/...`` from ``filesystem`` in this process."""
    _s3_buckets[bucket] = filesystem


def bind_s3(location: str, conn_id: str) -> None:
    """The bucket of ``location`` is reached with Airflow connection ``conn_id`` (read when first used)."""
    if is_s3(location):
        _s3_connections.setdefault(bucket_of(location), conn_id)


def _fs(uri: str) -> tuple[Any, str]:
    if is_s3(uri):
        bucket = bucket_of(uri)
        fs = _s3_buckets.get(bucket)
        if fs is None and bucket in _s3_connections:
            from offsetbatch.storage.s3 import S3Settings

            fs = _s3_buckets[bucket] = S3Settings.from_connection(_s3_connections[bucket]).filesystem()
        if fs is None:
            raise StorageConnectionError(
                f"{uri}: no storage connection is bound to bucket {bucket!r} in this process. Set sink.storage_conn_id "
                f"to an Airflow connection of type aws (access key, secret, endpoint_url, region_name).")
        return fs, uri.partition("://")[2]
    return fsspec.core.url_to_fs(uri)


@contextmanager
def _fs_of(uri: str) -> Iterator[tuple[Any, str]]:
    """The filesystem and path of ``uri``; on S3, a failure no retry fixes (refused credentials, no
    such bucket) or an endpoint that did not answer raised as its own error (``s3.translate_error``)."""
    fs, path = _fs(uri)
    try:
        yield fs, path
    except OSError as exc:
        if not is_s3(uri):
            raise
        from offsetbatch.storage.s3 import translate_error

        bucket = bucket_of(uri)
        conn = _s3_connections.get(bucket)
        error = translate_error(exc, f"{uri}" + (f" (connection '{conn}')" if conn else ""), bucket)
        if error is None:
            raise
        raise error from exc


def exists(uri: str) -> bool:
    with _fs_of(uri) as (fs, path):
        return fs.exists(path)


def read_json(uri: str) -> Any:
    with _fs_of(uri) as (fs, path), fs.open(path, "r") as f:
        return json.load(f)


def read_json_if_exists(uri: str) -> Any | None:
    """``read_json``, or ``None`` when the file is not there, also when another process deleted it
    after this one saw it (a check then a read is two requests)."""
    try:
        return read_json(uri) if exists(uri) else None
    except FileNotFoundError:
        return None


def read_bytes(uri: str) -> bytes:
    """A whole (small) file's bytes."""
    with _fs_of(uri) as (fs, path), fs.open(path, "rb") as f:
        return f.read()


def write_json(uri: str, obj: Any) -> None:
    """Readers never see half a file: on a disk, a temporary name and a rename; on an object
    store, one PUT (an object appears whole or not at all)."""
    text = json.dumps(obj, indent=1, sort_keys=True, default=str)
    with _fs_of(uri) as (fs, path):
        if not renames_are_cheap(uri):
            with fs.open(path, "w") as f:
                f.write(text)
            return
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        tmp = f"{path}.tmp"
        with fs.open(tmp, "w") as f:
            f.write(text)
        fs.mv(tmp, path)


def write_empty_parquet(folder: str, schema: Any) -> str:
    """Replace ``folder`` with one Parquet file of ``schema`` (an Arrow schema) and no rows, what
    Spark writes for an empty frame, without a Spark job; returns the file's URI."""
    import pyarrow.parquet as pq

    remove(folder)
    uri = f"{folder}/part-00000-empty.parquet"
    with _fs_of(uri) as (fs, path):
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with fs.open(path, "wb") as f:
            pq.write_table(schema.empty_table(), f)
    return uri


def remove(uri: str, best_effort: bool = False) -> bool:
    """Delete ``uri`` (a file or a folder tree). Gone is gone: another process that removed it first
    (between the check and the delete, or halfway through the tree) is no error. With
    ``best_effort``, a folder another process is still writing into (``OSError``: not empty) is
    left, and ``False`` returned, instead of raising."""
    with _fs_of(uri) as (fs, path):
        try:
            if fs.exists(path):
                fs.rm(path, recursive=True)
        except OSError as exc:
            if isinstance(exc, FileNotFoundError) and not fs.exists(path):
                return True  # another process removed it first
            if not best_effort or is_s3(uri):  # on S3 nothing is "not empty": the error means something
                raise
            return False
    return True


def move(src: str, dst: str) -> None:
    """Rename ``src`` to ``dst`` (atomic for a directory on local disks and HDFS; on an object store
    a copy of every object: publishing code asks ``renames_are_cheap`` first)."""
    with _fs_of(src) as (fs, s):
        d = _fs(dst)[1]
        fs.makedirs(d.rsplit("/", 1)[0], exist_ok=True)
        fs.mv(s, d, recursive=True)


def files(uri: str, suffix: str = ".parquet") -> list[str]:
    """The files under ``uri`` ending in ``suffix``, as URIs of the same scheme as ``uri``."""
    with _fs_of(uri) as (fs, path):
        if not fs.exists(path):
            return []
        found = sorted(p for p in fs.find(path) if p.endswith(suffix))
    if is_s3(uri):
        return [f"{scheme(uri)}://{p.lstrip('/')}" for p in found]
    return found


def children(uri: str) -> list[str]:
    """The names directly under folder ``uri`` (none if it does not exist)."""
    with _fs_of(uri) as (fs, path):
        if not fs.exists(path):
            return []
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(path, detail=False))


def info(uri: str) -> tuple[int, float]:
    """(size in bytes, modification time as a UNIX timestamp) of the file ``uri``; on an object
    store its object's (one HEAD)."""
    with _fs_of(uri) as (fs, path):
        entry = fs.info(path)
    return int(entry.get("size") or 0), _timestamp(entry)


def _timestamp(entry: dict) -> float:
    """An fsspec entry's modification time: ``mtime`` (a float locally, a datetime from pyarrow's
    S3), or ``created`` (fsspec's memory filesystem)."""
    from datetime import datetime, timezone

    when = entry.get("mtime") or entry.get("created") or entry.get("LastModified")
    if isinstance(when, datetime):
        when = (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()
    return float(when or 0.0)


def newest(uri: str) -> float:
    """The newest modification time of anything under ``uri`` (a file, or a folder tree: an attempt
    still writing keeps it young); 0 when nothing is there."""
    with _fs_of(uri) as (fs, path):
        if not fs.exists(path):
            return 0.0
        entries = dict(fs.find(path, detail=True, withdirs=True))
        if not is_s3(uri):
            entries[path] = fs.info(path)
    return max((_timestamp(e) for e in entries.values()), default=0.0)


@contextmanager
def open_write(uri: str) -> Iterator[Any]:
    """A binary file to write ``uri`` into (its folder made first on a disk). On an object store
    the object appears when the file is closed, whole."""
    with _fs_of(uri) as (fs, path):
        if renames_are_cheap(uri):
            fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with fs.open(path, "wb") as f:
            yield f


def read_parquet(uri: str, columns: list[str] | None = None):
    """The Arrow table of one Parquet file (of ``columns`` only, when given)."""
    import pyarrow.parquet as pq

    with _fs_of(uri) as (fs, path), fs.open(path, "rb") as f:
        return pq.read_table(f, columns=columns)


def parquet_rows(uri: str) -> int:
    """The row count in a Parquet file's footer."""
    import pyarrow.parquet as pq

    with _fs_of(uri) as (fs, path), fs.open(path, "rb") as f:
        return pq.ParquetFile(f).metadata.num_rows


def parquet_schema(uri: str):
    """The Arrow schema in a Parquet file's footer (the file's data is not read)."""
    import pyarrow.parquet as pq

    with _fs_of(uri) as (fs, path), fs.open(path, "rb") as f:
        return pq.read_schema(f)
