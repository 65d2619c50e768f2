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


def pin(pipeline: "Pipeline", ledger: "Ledger", batches: "list[Batch]", schemas: Schemas) -> Schemas:
    """The schemas the batches' specs get: the versions registered while the plan ran added, the
    readers as resolved before (``latest`` stays pinned), recorded in the ledger per batch."""
    schemas = {role: refreshed(pipeline, s, role) for role, s in schemas.items()}
    found = {role: s for role, s in schemas.items() if s is not None}
    detail = found["value"].recorded() if "value" in found else {}
    if "key" in found:
        detail = {**detail, "key": found["key"].recorded()}
    with ledger.lock(pipeline.name) as conn:
        for b in batches:
            ledger.event(conn, pipeline.name, "value_schema", detail, b.batch_id)
    for b in batches:
        for role, s in found.items():
            log.info("pipeline %s batch %d: %s schemas: %s", pipeline.name, b.batch_id, role, s.describe())
    return schemas
