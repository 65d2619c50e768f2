"""Intents: a swap of a table's folders written down before its first rename, so whoever finds it
(the next pass, publish or retire) finishes it; the one way compaction changes what readers list."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field

from offsetbatch import faults, storage
from offsetbatch.sinks.files.layout import CompactionLayout, FilesTable, GroupManifest

log = logging.getLogger(__package__)


@dataclass
class Intent:
    """A swap written down before its first rename, so whoever finds it finishes it. ``before``
    is removed first (a retired member's manifest on an object store: its rows must not be read
    from its own files once the group no longer holds them); ``moves`` run in order, each only if
    its source is there and its target is not; then the group manifest is written (``None``:
    deleted), pointers set and dropped, ``expire`` noted in ``expire_note`` (files the swap
    replaced, deleted by retention after the grace: a reader may still be reading them),
    ``cleanup`` removed, the intent deleted, and last ``trash`` (a crash before that leaves trash
    for retention, never a half swap)."""

    group: int
    why: str
    moves: list[list[str]]
    manifest: dict | None
    set_members: list[int] = field(default_factory=list)
    drop_members: list[int] = field(default_factory=list)
    cleanup: list[str] = field(default_factory=list)
    trash: str = ""
    before: list[str] = field(default_factory=list)
    expire: list[str] = field(default_factory=list)
    expire_note: str = ""


def write_intent(layout: CompactionLayout, intent: Intent) -> None:
    storage.write_json(layout.pending(intent.group), asdict(intent))


def carry_out(layout: CompactionLayout, intent: Intent, point: str) -> int:
    """Do ``intent`` (idempotent: a rerun skips every step already done); the renames it made."""
    moved = 0
    for path in intent.before:
        storage.remove(path)
    for src, dst in intent.moves:
        if storage.exists(src) and not storage.exists(dst):
            storage.move(src, dst)
            moved += 1
            if moved == 1:
                faults.checkpoint(point)
    if intent.manifest is None:
        storage.remove(layout.group(intent.group))
    else:
        GroupManifest(**intent.manifest).save(layout.group(intent.group))
    if point and not intent.moves:
        faults.checkpoint(point)  # an object store's swap: the group manifest is written, its pointers not yet
    for member in intent.set_members:
        storage.write_json(layout.member(member), {"group": intent.group})
    for member in intent.drop_members:
        storage.remove(layout.member(member))
    if intent.expire:
        storage.write_json(intent.expire_note, {"group": intent.group, "why": intent.why, "files": intent.expire})
    for path in intent.cleanup:
        storage.remove(path)
    storage.remove(layout.pending(intent.group))
    if intent.trash:
        storage.remove(intent.trash)
    return moved


def pending_intents(layout: CompactionLayout) -> list[str]:
    """Intents left by a killed process: one listing of the compactions folder (every publish asks)."""
    return [f"{layout.base}/{name}" for name in storage.children(layout.base)
            if name.startswith("pending-") and name.endswith(".json")]


def finish_pending(sink: FilesTable) -> int:
    """Finish every swap a killed process left half done (before anything reads a group)."""
    layout = CompactionLayout(sink.layout.meta)
    finished = 0
    for uri in pending_intents(layout):
        raw = storage.read_json_if_exists(uri)
        if raw is None:
            continue
        intent = Intent(**raw)
        log.warning("%s: finishing the %s of group %d a killed process left half done (%s)",
                    sink.where(intent.group), intent.why, intent.group, uri)
        carry_out(layout, intent, "")
        finished += 1
    return finished


def orphaned_staging(layout: CompactionLayout) -> list[str]:
    """Staged compactions no intent names: a pass killed before its swap began."""
    named = set()
    for uri in pending_intents(layout):
        raw = storage.read_json_if_exists(uri) or {}
        named.update(src for src, _ in raw.get("moves", []))
    staged = [f"{layout.staged_base}/{name}" for name in storage.children(layout.staged_base)]
    return [s for s in staged if not any(src == s or src.startswith(f"{s}/") for src in named)]

