"""File operations on the sink through fsspec, so a table can live on a local disk or any
Hadoop-compatible store fsspec reaches (``file://``, ``hdfs://``, ``s3a://`` with the right
fsspec implementation installed)."""

from __future__ import annotations

import json
from typing import Any

import fsspec


def _fs(uri: str):
    return fsspec.core.url_to_fs(uri)


def exists(uri: str) -> bool:
    fs, path = _fs(uri)
    return fs.exists(path)


def read_json(uri: str) -> Any:
    fs, path = _fs(uri)
    with fs.open(path, "r") as f:
        return json.load(f)


def write_json(uri: str, obj: Any) -> None:
    """Write via a temporary name and rename, so readers never see half a file."""
    fs, path = _fs(uri)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    tmp = f"{path}.tmp"
    with fs.open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True, default=str)
    fs.mv(tmp, path)


def remove(uri: str) -> None:
    fs, path = _fs(uri)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def move(src: str, dst: str) -> None:
    """Rename ``src`` to ``dst`` (atomic for a directory on local disks and HDFS)."""
    fs, s = _fs(src)
    _, d = _fs(dst)
    fs.makedirs(d.rsplit("/", 1)[0], exist_ok=True)
    fs.mv(s, d, recursive=True)


def files(uri: str, suffix: str = ".parquet") -> list[str]:
    fs, path = _fs(uri)
    if not fs.exists(path):
        return []
    return sorted(p for p in fs.find(path) if p.endswith(suffix))


def parquet_schema(uri: str):
    """The Arrow schema in a Parquet file's footer (the file's data is not read)."""
    import pyarrow.parquet as pq

    fs, path = _fs(uri)
    with fs.open(path, "rb") as f:
        return pq.read_schema(f)
