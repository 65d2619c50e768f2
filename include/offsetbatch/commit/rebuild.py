"""``offsetbatch ledger rebuild``: a lost ledger, rebuilt from what the table says it holds.

Every published output carries its manifest (the files sink: ``_offsetbatch/manifests/
batch_id=N.json``): per partition the planned range ``[from, until)``, the rows read and
rejected. From those the rebuild restores, for one pipeline, a committed batch per published
output id (same id, same ranges, same row counts), each partition's first offset and frontier,
and a gap row (reason ``rebuild``) wherever the published ranges of a partition are not
contiguous, so the ledger's invariants hold again and the next run continues exactly where the
lost ledger stood. Then the table is claimed by the ledger it was rebuilt into.

What manifests do not record is not invented: run ids, data intervals and batch kinds (every
rebuilt batch is ``incremental``); batches that were planned but never published are gone with
the old ledger (their offsets are re-read by the next run, which is what "planned" meant).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from offsetbatch.errors import RebuildRefusedError
from offsetbatch.jobspec import Manifest
from offsetbatch.ledger import Ledger
from offsetbatch.model import Gap, OffsetRange, TopicPartition
from offsetbatch.sinks import KeepsManifests, Sink

log = logging.getLogger(__name__)


@dataclass
class RebuildPlan:
    pipeline: str
    table: str
    batches: dict[int, Manifest]
    starts: dict[TopicPartition, int] = field(default_factory=dict)
    frontier: dict[TopicPartition, int] = field(default_factory=dict)
    gaps: list[Gap] = field(default_factory=list)

    @property
    def records(self) -> int:
        return sum(r.until_offset - r.from_offset for m in self.batches.values() for r in m.ranges)

    def to_dict(self) -> dict:
        return {
            "pipeline": self.pipeline, "table": self.table, "batches": sorted(self.batches),
            "records": self.records,
            "partitions": [{"topic": tp.topic, "partition": tp.partition, "start_offset": self.starts[tp],
                            "frontier": self.frontier[tp]} for tp in sorted(self.frontier)],
            "gaps": [vars(g) for g in self.gaps],
        }


def plan_rebuild(name: str, sink: Sink) -> RebuildPlan:
    """What the ledger of ``pipeline`` held, read from the sink's published manifests."""
    where = f"pipeline {name}: the {sink.target}"
    if not isinstance(sink, KeepsManifests):
        raise RebuildRefusedError(
            f"{where} keeps no manifests of its batches (the {sink.type} sink), so its ledger cannot be rebuilt from "
            f"it. Nothing was changed. Restore the ledger from a backup.")
    manifests = sink.published_manifests()
    if not manifests:
        raise RebuildRefusedError(f"{where} holds no published batch; there is nothing to rebuild. A new ledger is "
                                  f"created by 'offsetbatch ledger init' or the pipeline's first run.")
    plan = RebuildPlan(name, sink.settings.root, manifests)
    by_tp: dict[TopicPartition, list[tuple[int, int, int]]] = {}
    for output_id, m in manifests.items():
        if m.pipeline != name:
            raise RebuildRefusedError(f"{where} holds batch {output_id} of pipeline {m.pipeline}; a table belongs to "
                                      f"one pipeline. Nothing was changed.")
        for r in m.ranges:
            by_tp.setdefault(TopicPartition(r.topic, r.partition), []).append((r.from_offset, r.until_offset, output_id))
    for tp, spans in sorted(by_tp.items()):
        spans.sort()
        plan.starts[tp] = spans[0][0]
        for (a0, a1, a_id), (b0, _, b_id) in zip(spans, spans[1:]):
            if b0 < a1:
                raise RebuildRefusedError(
                    f"{where}: published batches {a_id} and {b_id} both hold offsets [{b0}, {a1}) of {tp}, so the "
                    f"table is not exactly-once and no consistent ledger can describe it. Nothing was changed. "
                    f"Remove the duplicate output first (see 'offsetbatch batch {name} {b_id}').")
            if b0 > a1:
                plan.gaps.append(Gap(tp.topic, tp.partition, a1, b0, reason="rebuild"))
        plan.frontier[tp] = spans[-1][1]
    return plan


def apply_rebuild(ledger: Ledger, sink: Sink, plan: RebuildPlan, actor: str | None = None) -> None:
    """Write ``plan`` into ``ledger`` (which must have no record of the pipeline), in one
    transaction under the pipeline lock, then claim the table for this ledger."""
    name = plan.pipeline
    if ledger.knows(name):
        raise RebuildRefusedError(
            f"pipeline {name}: ledger {ledger.identity} already has batches of this pipeline; a rebuild only fills a "
            f"ledger that has none. Nothing was changed.")
    with ledger.lock(name) as conn:
        ledger.restore(conn, name, plan.starts, plan.frontier, plan.gaps,
                       [(output_id, [OffsetRange(r.topic, r.partition, r.from_offset, r.until_offset, r.from_offset)
                                     for r in m.ranges],
                         {"rows_in": m.rows_in, "rows_out": m.rows_out, "rows_rejected": m.rows_rejected,
                          "bytes_in": m.bytes_in, "job_seconds": m.job_seconds, "committed_attempt": m.attempt},
                         {TopicPartition(r.topic, r.partition): (r.rows, r.rejected) for r in m.ranges})
                        for output_id, m in sorted(plan.batches.items())],
                       output_path=plan.table, actor=actor)
    sink.claim(ledger.identity)
    log.warning("pipeline %s: ledger %s rebuilt from %d published batch(es) of %s (%d records, %d gap row(s)); the "
                "table now belongs to this ledger", name, ledger.identity, len(plan.batches), plan.table,
                plan.records, len(plan.gaps))
