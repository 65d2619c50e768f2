"""Where a files table's compaction keeps its own files, what a group folder holds, the sink as
maintenance uses it, and the file-system readings every step shares (times, sizes, rows)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timezone
from typing import Iterable, Protocol

from offsetbatch import storage
from offsetbatch.jobspec import Manifest
from offsetbatch.sinks.rejected_files import RejectedFolders

class _Layout(Protocol):
    """``files.TableLayout`` as this module uses it (``files`` imports this module, not back)."""

    root: str
    meta: str

    def data(self, output_id: int) -> str: ...

    def manifest(self, output_id: int) -> str: ...

    def attempt(self, batch_id: int, attempt: str) -> str: ...


class FilesTable(Protocol):
    """What maintenance needs of ``files.FilesSink``."""

    layout: _Layout
    rejected: RejectedFolders
    target: str

    @property
    def in_place(self) -> bool: ...

    def where(self, batch_id: int | None = None, target: str | None = None) -> str: ...

    def published_manifests(self) -> dict[int, Manifest]: ...

COMPACTION_STAGED = "maintain.files_compaction_staged"
COMPACTION_SWAPPING = "maintain.files_compaction_swapping"
RETENTION_DELETING = "maintain.files_retention_deleting"
GROUP_SWAPPING = "commit.files_group_swapping"
GROUP_LEFT = "commit.files_group_left"


@dataclass(frozen=True)
class CompactionLayout:
    """The compaction's own files, under the table's ``_offsetbatch/`` (hidden from readers)."""

    meta: str

    @property
    def base(self) -> str:
        return f"{self.meta}/compactions"

    def group(self, group_id: int) -> str:
        return f"{self.base}/batch_id={group_id}.json"

    def member(self, output_id: int) -> str:
        return f"{self.base}/members/batch_id={output_id}.json"

    def pending(self, group_id: int) -> str:
        return f"{self.base}/pending-{group_id}.json"

    @property
    def staged_base(self) -> str:
        return f"{self.base}/staged"

    def staged(self, group_id: int, stamp: int) -> str:
        return f"{self.staged_base}/batch_id={group_id}-{stamp}"

    def trash(self, group_id: int, stamp: int) -> str:
        return f"{self.meta}/trash/compaction-{group_id}-{stamp}"


@dataclass
class GroupManifest:
    """What a group folder holds: per file (relative to ``batch_id=G``), the ``[member, start, end)``
    row spans; each member's attempt and Kafka ranges."""

    group: int
    members: list[int]
    files: dict[str, list[list[int]]]
    attempts: dict[str, str | None] = field(default_factory=dict)
    ranges: dict[str, list[dict]] = field(default_factory=dict)
    day: str = ""
    updated_at: str = ""

    def save(self, uri: str) -> None:
        storage.write_json(uri, asdict(self))

    @classmethod
    def load_if_exists(cls, uri: str) -> "GroupManifest | None":
        raw = storage.read_json_if_exists(uri)
        return None if raw is None else cls(**raw)

    def rows_of(self, member: int) -> int:
        return sum(end - start for spans in self.files.values() for m, start, end in spans if m == member)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


def local_path(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


def mtime(uri: str) -> float:
    return os.stat(local_path(uri)).st_mtime


def newest_mtime(uri: str) -> float:
    """The newest modification time in a folder tree: an attempt still writing keeps it young."""
    if storage.is_s3(uri):
        return _newest_object(uri)
    path = local_path(uri)
    newest = os.stat(path).st_mtime
    for folder, dirs, names in os.walk(path):
        for name in dirs + names:
            try:
                newest = max(newest, os.stat(os.path.join(folder, name)).st_mtime)
            except FileNotFoundError:
                continue
    return newest


def _newest_object(uri: str) -> float:
    """``_newest_mtime`` on an object store: the newest object under the prefix (0: none)."""
    with storage._fs_of(uri) as (fs, path):
        entries = fs.find(path, detail=True) if fs.exists(path) else {}
    newest = 0.0
    for entry in entries.values():
        when = entry.get("mtime") or entry.get("created") or entry.get("LastModified")
        if isinstance(when, datetime):
            when = utc(when).timestamp()
        newest = max(newest, float(when or 0.0))
    return newest


def day_of(ts: float) -> date:
    return datetime.fromtimestamp(ts, timezone.utc).date()


def utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def parquet_rows(uri: str) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(local_path(uri)).metadata.num_rows


def mib(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB"



def output_ids(names: Iterable[str], suffix: str = ".json") -> set[int]:
    """The output ids of ``batch_id=N<suffix>`` names."""
    found = set()
    for name in names:
        number = name[len("batch_id="):-len(suffix)] if name.startswith("batch_id=") and name.endswith(suffix) else ""
        if number.isdigit():
            found.add(int(number))
    return found
