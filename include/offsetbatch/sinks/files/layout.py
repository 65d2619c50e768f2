"""The files table's layout: where published batches and their manifests are (``TableLayout``),
where compaction keeps its own files, what a group folder holds, the sink as maintenance uses it, and the file-system readings every step shares (times, sizes, rows)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timezone
from typing import Iterable, Protocol

from offsetbatch import storage
from offsetbatch.jobspec import Manifest
from offsetbatch.sinks.rejected_files import RejectedFolders
from offsetbatch.sinks.staging import StagingLayout


class TableLayout(StagingLayout):
    """The staging area plus the published paths of a Parquet-folder table."""

    def data(self, output_id: int) -> str:
        return f"{self.root}/batch_id={output_id}"

    def manifest(self, output_id: int) -> str:
        return f"{self.meta}/manifests/batch_id={output_id}.json"


class FilesTable(Protocol):
    """What maintenance needs of ``files.FilesSink``."""

    layout: TableLayout
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

    # on an object store (nothing is renamed): where a group's files are written, and the notes of
    # the files a swap replaced, deleted once no reader can still be reading them (``retention``)

    @property
    def files_base(self) -> str:
        return f"{self.base}/files"

    def files(self, group_id: int, stamp: int) -> str:
        return f"{self.files_base}/{group_id}-{stamp}"

    def expiry_note(self, group_id: int, stamp: int) -> str:
        return f"{self.expiring}/{group_id}-{stamp}.json"

    @property
    def expiring(self) -> str:
        return f"{self.base}/expiring"


@dataclass
class GroupManifest:
    """What a group folder holds: per file (relative to ``batch_id=G``; ``in_place``: relative to
    the table's root, anywhere in it), the ``[member, start, end)`` row spans; each member's
    attempt and Kafka ranges. On an object store this manifest is the publication: the members'
    rows are read from its files, not from the files their own manifests name."""

    group: int
    members: list[int]
    files: dict[str, list[list[int]]]
    attempts: dict[str, str | None] = field(default_factory=dict)
    ranges: dict[str, list[dict]] = field(default_factory=dict)
    day: str = ""
    updated_at: str = ""
    in_place: bool = False

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
    return storage.info(uri)[1]


def newest_mtime(uri: str) -> float:
    """The newest modification time in a folder tree: an attempt still writing keeps it young."""
    return storage.newest(uri)


def day_of(ts: float) -> date:
    return datetime.fromtimestamp(ts, timezone.utc).date()


def utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def root_relative(sink: FilesTable, uri: str) -> str:
    """``uri``'s path under the table's root (how an object store's group manifest names files)."""
    root = sink.layout.root.rstrip("/") + "/"
    if not uri.startswith(root):
        raise ValueError(f"{sink.where()}: {uri} is not under the table's root {root}")
    return uri[len(root):]


def partition_of(rel: str) -> str:
    """The Hive partition folders (``event_date=D``) a file's path ends in, before its name."""
    folders = rel.split("/")[:-1]
    n = len(folders)
    while n and "=" in folders[n - 1]:
        n -= 1
    return "/".join(folders[n:])


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
