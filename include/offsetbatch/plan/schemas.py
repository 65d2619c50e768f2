"""The schemas a batch is decoded with, found by the plan task through each format's plan-time hook
(``ValueFormat.resolve_schemas``): before the ledger is opened (a registry that is down, refuses the
credentials or lacks the subject changes nothing), refreshed after the plan for versions registered
in between, recorded with each batch in the ledger and written into its job spec. A format without
schemas (``raw``, ``json``) resolves to nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from offsetbatch.formats import ResolvedSchemas, SchemaContext

if TYPE_CHECKING:
    from offsetbatch.ledger import Ledger
    from offsetbatch.model import Batch
    from offsetbatch.pipeline import Pipeline
    from offsetbatch.source.schema_registry import SchemaRegistry

log = logging.getLogger(__name__)
ROLES = ("value", "key")
Schemas = dict[str, ResolvedSchemas | None]  # by role


def _context(pipeline: "Pipeline", role: str, registry: "Callable[[], SchemaRegistry] | None") -> SchemaContext:
    cfg = pipeline.cfg
    return SchemaContext(cfg.name, role, tuple(cfg.kafka.topics) if cfg.kafka.topics else None, cfg.base_dir,
                         registry)


def resolve(pipeline: "Pipeline", role: str = "value",
            registry: "Callable[[], SchemaRegistry] | None" = None) -> ResolvedSchemas | None:
    """The schemas of the pipeline's values (``role`` "value") or keys ("key") now. ``registry``
    opens the registry client (default: the settings' ``schema_registry`` connection)."""
    settings = getattr(pipeline.cfg, role)
    return settings.parser.resolve_schemas(settings, _context(pipeline, role, registry))


def resolve_all(pipeline: "Pipeline") -> Schemas:
    return {role: resolve(pipeline, role) for role in ROLES}


def refreshed(pipeline: "Pipeline", schemas: ResolvedSchemas | None, role: str = "value",
              registry: "Callable[[], SchemaRegistry] | None" = None) -> ResolvedSchemas | None:
    """``schemas`` with what the registry gained since they were resolved (same reader)."""
    settings = getattr(pipeline.cfg, role)
    return settings.parser.refresh_schemas(settings, schemas, _context(pipeline, role, registry))


def pin(pipeline: "Pipeline", ledger: "Ledger", batches: "list[Batch]", schemas: Schemas) -> dict[int, Schemas]:
    """The schemas each batch's spec gets, by batch id: the versions registered while the plan ran
    added, the readers as resolved before (``latest`` stays pinned), and for a replay the writers its
    target was planned with too (``with_planned``), recorded in the ledger per batch."""
    schemas = {role: refreshed(pipeline, s, role) for role, s in schemas.items()}
    per_batch = {b.batch_id: with_planned(pipeline, b, schemas) for b in batches}
    with ledger.lock(pipeline.name) as conn:
        for b in batches:
            found = {role: s for role, s in per_batch[b.batch_id].items() if s is not None}
            detail = found["value"].recorded() if "value" in found else {}
            if "key" in found:
                detail = {**detail, "key": found["key"].recorded()}
            ledger.event(conn, pipeline.name, "value_schema", detail, b.batch_id)
    for b in batches:
        for role, s in per_batch[b.batch_id].items():
            if s is not None:
                log.info("pipeline %s batch %d: %s schemas: %s", pipeline.name, b.batch_id, role, s.describe())
    return per_batch


def with_planned(pipeline: "Pipeline", batch: "Batch", schemas: Schemas) -> Schemas:
    """A replay decodes with today's reader and, besides today's writers, every writer its target
    batch was planned with (read from the target's job spec): a writer version deleted from the
    registry since must not turn records the first run accepted into rejections that replace them
    (issue 41, case 7). Other batches get ``schemas`` as they are."""
    if not batch.target_batch_id:
        return schemas
    from offsetbatch import storage
    from offsetbatch.jobspec import JobSpec

    uri = pipeline.sink.staging.spec(batch.target_batch_id)
    if not storage.exists(uri):
        log.warning("pipeline %s batch %d: the job spec of batch %d, which it replays, is gone (%s): it decodes with "
                    "today's schemas only", pipeline.name, batch.batch_id, batch.target_batch_id, uri)
        return schemas
    planned = JobSpec.load(uri)
    by_role = {"value": planned.value_schemas, "key": (planned.key or {}).get("value_schemas")}
    out = {}
    for role, s in schemas.items():
        settings = getattr(pipeline.cfg, role)
        out[role] = settings.parser.keep_planned(settings, s, by_role.get(role))
    return out
