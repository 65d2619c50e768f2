"""The ledger and the table know each other (docs/architecture.md, *Ownership*).

A ledger has an identity, made once when it is created; a sink's output records which ledger and
pipeline own it (``Sink.claim``, on first publish). Before planning, committing and reporting,
``check`` refuses when they disagree, or when the ledger has no record of batches the table
holds. Without this, a lost, replaced or mistyped ledger (a typo in the connection, a move from
SQLite to PostgreSQL without copying the ledger) starts again at offset 0 and writes every record
a second time next to the first.
"""

from __future__ import annotations

from offsetbatch import redact
from offsetbatch.ledger import Ledger, OwnershipError
from offsetbatch.sinks import Sink

FIX = ("Either point the pipeline at the ledger that owns the table (ledger.url or the ledger's Airflow "
       "connection), or, if that ledger is lost, rebuild it from the table: 'offsetbatch ledger rebuild {pipeline}' "
       "(a dry run; add --apply).")


def creates_ledger(sink: Sink) -> bool:
    """A run may create a missing ledger only for an output nobody published to or claimed yet."""
    return sink.owner() is None and not sink.published_ids()


def check(name: str, ledger: Ledger, sink: Sink) -> None:
    """Refuse (``OwnershipError``, nothing changed) unless ``ledger`` owns ``sink``'s output."""
    where = f"pipeline {name}: the {sink.target}"
    owner = sink.owner()
    if owner is not None:
        if owner.get("ledger_id") != ledger.identity or owner.get("pipeline") != name:
            raise OwnershipError(
                f"{where} belongs to ledger {owner.get('ledger_id')} (pipeline {owner.get('pipeline')}), but this run "
                f"uses ledger {ledger.identity} at {_shown(ledger)} (pipeline {name}). Nothing was changed. "
                + FIX.format(pipeline=name))
        return
    published = sink.published_ids()
    if not published:
        _check_not_moved(name, ledger, sink, where)
        return
    known = ledger.committed_ids(name)
    unknown = [i for i in published if i not in known]
    if unknown:
        what = "has no record of this pipeline" if not known else f"does not know batch(es) {_ids(unknown)}"
        raise OwnershipError(
            f"{where} holds {len(published)} published batch(es) ({_ids(published)}), but ledger {ledger.identity} "
            f"at {_shown(ledger)} {what}. Nothing was changed: planning from this ledger would re-read what the "
            f"table already holds. " + FIX.format(pipeline=name))


def _check_not_moved(name: str, ledger: Ledger, sink: Sink, where: str) -> None:
    """An output with no owner mark and no batch, under a ledger that has published batches of the
    pipeline: the sink's path or table changed (a typo, a new folder). Planning on from the frontier
    would put the new batches there and leave the earlier ones behind, splitting the pipeline's data.
    (A batch committed but not yet published, after a crash, claims nothing yet: that is rolled
    forward, not refused.)"""
    last = ledger.last_published(name)
    if last is None:
        return
    batch_id, path = last
    raise OwnershipError(
        f"{where} holds no batch and no owner mark, but ledger {ledger.identity} at {_shown(ledger)} has published "
        f"batches of pipeline {name} up to batch {batch_id}, to {path}. Nothing was changed: planning on from the "
        f"ledger's frontier would start the pipeline's data over in a new place. If the sink's path or table "
        f"changed by mistake, set it back; to move the output, move the table with its _offsetbatch folder (or, for "
        f"a database table, rename it back); to start over on purpose, give the pipeline a new name or a new ledger.")


def _ids(ids: list[int], limit: int = 6) -> str:
    shown = ", ".join(str(i) for i in ids[:limit])
    return shown + (f", … ({len(ids) - limit} more)" if len(ids) > limit else "")


def _shown(ledger: Ledger) -> str:
    return redact.url(ledger.engine.url.render_as_string(hide_password=True))
