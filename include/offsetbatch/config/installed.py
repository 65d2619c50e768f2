"""Which pipelines this installation runs: the one reader behind the DAG factory, the UI plugin,
the ``offsetbatch`` CLI and ``make setup`` (one pool per pipeline), so they never disagree.

``OFFSETBATCH_PIPELINES`` lists YAML files and folders of them, separated by ``:``
(``os.pathsep``); a folder gives its ``*.yaml``/``*.yml`` files, sorted. Unset or empty, it is the
checkout's ``include/pipelines/``; an installed package has no default, and says so. A file that
does not load is reported (file and field named) and does not hide the others; a pipeline name
used twice keeps its first file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from offsetbatch.config import _NAME, PIPELINES_DIR, PipelineConfig, load_config
from offsetbatch.errors import ConfigError
from offsetbatch.storage.locations import bucket_of, is_s3

ENV = "OFFSETBATCH_PIPELINES"


def sources(value: str | None = None) -> list[Path]:
    """The configured entries: ``value`` (a ``--pipelines`` argument), else ``OFFSETBATCH_PIPELINES``,
    else the checkout's pipelines folder (none when installed from the wheel)."""
    text = value if value is not None else (os.environ.get(ENV) or str(PIPELINES_DIR or ""))
    return [Path(entry) for entry in text.split(os.pathsep) if entry]


def config_files(value: str | None = None) -> list[Path]:
    """The config files of ``sources(value)``, in order (entries that do not exist are left out)."""
    files: list[Path] = []
    for path in sources(value):
        files.extend(sorted(path.glob("*.y*ml")) if path.is_dir() else [path] if path.exists() else [])
    return files


@dataclass(frozen=True)
class Installed:
    """What ``read`` found: the configs that load, by name, and what is wrong with the rest."""

    configs: dict[str, PipelineConfig]
    errors: tuple[str, ...]  # one line of context per file that does not load (file and field named)
    missing: tuple[str, ...]  # configured entries that do not exist
    stamp: tuple  # (file, mtime) of every file read: a reader that caches compares it

    def strict(self) -> dict[str, PipelineConfig]:
        """The configs, or ``ConfigError`` naming every entry or file that does not load."""
        problems = [*self.missing, *self.errors]
        if problems:
            raise ConfigError("; ".join(problems))
        return self.configs


UNSET = (f"no pipelines are configured: set {ENV} (or --pipelines) to pipeline YAML files and folders of them, "
         f"separated by ':' (an installed offsetbatch has no sample pipelines)")


def _missing(path: Path) -> str:
    kind = "folder" if not path.suffix else "file"
    return (f"pipelines {kind} {path} does not exist; set {ENV} (or --pipelines) to pipeline YAML files and "
            f"folders of them, separated by ':'")


def stamp(value: str | None = None) -> tuple:
    """``(file, mtime_ns)`` of every config file: cheap, so a reader can tell when to read again."""
    out = []
    for f in config_files(value):
        try:
            out.append((str(f), f.stat().st_mtime_ns))
        except OSError:
            out.append((str(f), None))
    return tuple(out)


_NAME_LINE = re.compile(r"""^name[ \t]*:[ \t]*(?:'([^'\n]*)'|"([^"\n]*)"|([^\s#'"]+))[ \t]*(?:#.*)?$""", re.M)


def _may_be_named(path: Path, names: frozenset[str]) -> bool:
    """Whether ``path`` may hold a pipeline of one of ``names``, told from its top-level ``name:``
    line without loading it; a file whose name is written otherwise (not one such line, a value
    that is not a plain pipeline name, such as ``${VAR}``, or an unreadable file) may."""
    try:
        lines = _NAME_LINE.findall(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return True
    if len(lines) != 1:
        return True
    name = "".join(lines[0])
    return name in names or not re.fullmatch(_NAME, name)


def read(value: str | None = None, names: Iterable[str] | None = None) -> Installed:
    """Every installed config that loads, and one message per file that does not.

    ``names``: only the pipelines of these names are wanted (a task process parsing the DAG file
    for one DAG): files whose ``name:`` line says another name are not loaded, the rest are, in
    order, so a name used twice still keeps its first file. Checks across pipelines (a bucket two
    of them write) then see only these."""
    good: dict[str, PipelineConfig] = {}
    errors: list[str] = []
    files = config_files(value)
    if names is not None:
        wanted = frozenset(names)
        files = [f for f in files if _may_be_named(f, wanted)]
    for path in files:
        try:
            cfg = load_config(path)
        except ConfigError as exc:
            errors.append(str(exc))
            continue
        if cfg.name in good:
            errors.append(f"{path}: pipeline name '{cfg.name}' is already used by {good[cfg.name].source_file}; "
                          f"rename one of them (only the first is installed)")
            continue
        clash = _bucket_clash(cfg, good.values())
        if clash:
            errors.append(f"{path}: {clash}")
            continue
        good[cfg.name] = cfg
    configured = sources(value)
    missing = tuple(_missing(p) for p in configured if not p.exists()) if configured else (UNSET,)
    return Installed(good, tuple(errors), missing, stamp(value))


def _object_store_buckets(cfg: PipelineConfig) -> set[str]:
    """The buckets the pipeline's Spark job writes: its sink's location (an Iceberg warehouse too)."""
    places = (cfg.sink.root, getattr(cfg.sink, "warehouse", None))
    return {bucket_of(p) for p in places if p and is_s3(p)}


def _bucket_clash(cfg: PipelineConfig, installed) -> str | None:
    """A Spark Connect server keeps one S3A client per bucket, made with the credentials of the first
    session that opened the bucket (Hadoop's FileSystem cache is per JVM, not per session; turning it
    off leaks an AWS client and its threads per use), so two pipelines that reach one bucket on one
    server with two storage connections would write with each other's keys. The later file is
    refused, naming both (docs/architecture.md, *Pipelines sharing a Spark Connect server*)."""
    server = cfg.spark.connect_conn_id
    if server is None:
        return None
    for other in installed:
        if other.spark.connect_conn_id != server or other.sink.storage_conn_id == cfg.sink.storage_conn_id:
            continue
        shared = sorted(_object_store_buckets(cfg) & _object_store_buckets(other))
        if shared:
            return (f"pipeline '{cfg.name}' writes bucket {shared[0]} with storage connection "
                    f"'{cfg.sink.storage_conn_id}', and pipeline '{other.name}' ({other.source_file}) writes it with "
                    f"'{other.sink.storage_conn_id}', both on the Spark Connect server of connection '{server}': the "
                    f"server keeps one S3A client per bucket, made with the first session's credentials, so one "
                    f"would write with the other's keys. Give both the same storage connection, or run one on a "
                    f"Connect server of its own or with spark-submit (only '{other.name}' is installed)")
    return None


def load_all(value: str | None = None) -> dict[str, PipelineConfig]:
    """Every installed config by name; ``ConfigError`` if any entry or file does not load."""
    return read(value).strict()
