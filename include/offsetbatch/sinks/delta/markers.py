"""What a Delta commit says about the batch it published, and how the sink finds it again.

Each batch's commit carries two things (per table: rows, then rejected records):

* an **application transaction** ``(offsetbatch/<pipeline>, version)``: the Delta protocol's own
  record of how far a writer got, kept in every checkpoint, so it survives log cleanup. Its version
  is the greatest batch id the pipeline ever committed to the table. A table whose version is
  below batch N has never received N: the check every publish makes, without reading the log.
* the batch's **marker** in the commit's ``commitInfo`` (``sinks.markers``: batch and output ids,
  ranges, counts): what ``published_ids``, roll-forward past a greater id and ``ledger rebuild``
  read.

delta-rs records application transactions but does not refuse a second commit of the same
``(appId, version)`` (delta-rs#2580, #3821): two writers that both read "not there" would both
append. So the sink commits with ``max_commit_retries=0``: the commit must land on the version the
check read, or it fails and the check runs again on the new version (``sink._commit_once``).

**The archive.** ``commitInfo`` lives only in the log's JSON files, which log cleanup deletes
(checkpoints keep the table's state, not its commit history). Before maintenance cleans the log it
folds the markers of the versions it will delete into ``<table>/_offsetbatch/markers/
archive-<version>.json.gz`` (a new file per pass, never rewritten; the greatest version is the
current one). ``history`` is the archive's live markers, then those of the commits after its
version still in the log. Delta's vacuum skips folders whose name starts with ``_``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from offsetbatch import storage
from offsetbatch.sinks.markers import PREFIX, Archive, Published, applied_in, combined, decode, live_of, marker_of

if TYPE_CHECKING:
    from deltalake import DeltaTable

ARCHIVE_FOLDER = "_offsetbatch/markers"


def app_id(pipeline: str) -> str:
    """The application transaction's id: one writer per pipeline and table."""
    return f"offsetbatch/{pipeline}"


def commits(table: "DeltaTable", after: int | None = None) -> list[Published]:
    """The markers of the commits still in the log, oldest first (those after version ``after``)."""
    out = []
    for entry in reversed(table.history()):
        version = int(entry["version"])
        if after is not None and version <= after:
            continue
        marker = marker_of(version, {k: str(v) for k, v in entry.items() if k.startswith(PREFIX)})
        if marker is not None:
            out.append(marker)
    return out


def archive_path(location: str, through_version: int) -> str:
    return f"{location.rstrip('/')}/{ARCHIVE_FOLDER}/archive-{through_version:020d}.json.gz"


def archive_of(location: str) -> Archive | None:
    """The table's current archive (the greatest version's), ``None`` before the first log cleanup."""
    folder = f"{location.rstrip('/')}/{ARCHIVE_FOLDER}"
    if not storage.exists(folder):
        return None
    names = sorted(n.rsplit("/", 1)[-1] for n in storage.children(folder))
    names = [n for n in names if n.startswith("archive-") and n.endswith(".json.gz")]
    if not names:
        return None
    return decode(storage.read_bytes(f"{folder}/{names[-1]}"))


def history(table: "DeltaTable", location: str) -> Iterator[Published]:
    """Markers of the archive and of the log after it, oldest first."""
    archive = archive_of(location)
    yield from combined(archive, commits(table, archive.through_snapshot_id if archive else None))


def live(table: "DeltaTable", location: str) -> dict[int, Published]:
    """Output id -> the marker of the commit whose rows the table holds for it now."""
    return live_of(history(table, location))


def applied(table: "DeltaTable", location: str, pipeline: str, batch_id: int) -> Published | None:
    """The commit that published batch ``batch_id`` to this table, if it did. The application
    transaction answers "no" for every batch the pipeline has not reached; only a batch at or below
    it (a roll-forward) reads the log and the archive."""
    reached = table.transaction_version(app_id(pipeline))
    if reached is None or reached < batch_id:
        return None
    archive = archive_of(location)
    return applied_in(archive, commits(table, archive.through_snapshot_id if archive else None), batch_id)
