"""OpenLineage for a pipeline's tasks: what each task read and wrote, with the exact offsets.

Airflow's OpenLineage provider (``apache-airflow-providers-openlineage``) asks each operator for
``get_openlineage_facets_on_complete``; the plan, spark_job and commit operators answer from the
run's plan or commit result through ``task_lineage``. This module imports the OpenLineage client,
so only those methods import it, and only the provider calls them: without the provider nothing
here is loaded and nothing is slower.

* **Inputs**: one dataset per Kafka topic, named as the Kafka provider names topics
  (namespace ``kafka://host:port``, name the topic), with the standard ``schema`` facet (the
  fields the job parses, ``value.schema``) and the input facet ``offsetbatch_offsets``: the
  batch's ranges ``{batchId, topic, partition, from, until}`` (``until`` exclusive).
* **Outputs**: the sink's target in OpenLineage's naming (``file`` + path, ``s3://bucket`` + key,
  ``postgres://host:port`` + ``database.schema.table``, ``kafka://host:port`` + topic; Iceberg:
  ``iceberg://catalog`` + ``namespace.table``, for which the spec has no entry), and the rejected
  records as a second dataset (the dead-letter topic, or the ``_rejected`` folder). On the commit
  each gets ``outputStatistics`` (rows written, rows rejected).
* **Run facet** ``offsetbatch``: the pipeline, and per batch its id, kind (incremental, replay,
  backfill) and the batch it replays.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import attr
from openlineage.client.event_v2 import InputDataset, OutputDataset
from openlineage.client.facet_v2 import (
    InputDatasetFacet,
    RunFacet,
    output_statistics_output_dataset,
    schema_dataset,
)

if TYPE_CHECKING:
    from offsetbatch.pipeline import Pipeline

RANGE = re.compile(r"^(?P<topic>.+)/(?P<partition>\d+)\[(?P<start>\d+),(?P<until>\d+)\)$")
SCHEMA_BASE = "https://github.com/offsetbatch/offsetbatch/blob/main/docs/openlineage"


@attr.define
class OffsetRangesInputDatasetFacet(InputDatasetFacet):
    """The Kafka offsets a task read of one topic: ``{batchId, topic, partition, from, until}``."""

    ranges: list[dict[str, Any]] = attr.field(factory=list)

    @staticmethod
    def _get_schema() -> str:
        return f"{SCHEMA_BASE}/OffsetRangesInputDatasetFacet.json"


@attr.define
class OffsetbatchRunFacet(RunFacet):
    """Which pipeline and batches a task run worked on."""

    pipeline: str
    batches: list[dict[str, Any]] = attr.field(factory=list)

    @staticmethod
    def _get_schema() -> str:
        return f"{SCHEMA_BASE}/OffsetbatchRunFacet.json"


def _ranges(batches: list[dict]) -> dict[str, list[dict[str, Any]]]:
    """Per topic, the ranges of ``batches`` (each ``{"batch_id", "ranges": ["t/0[5,9)", …]}``)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for batch in batches:
        for text in batch.get("ranges") or []:
            m = RANGE.match(text)
            if m:
                out.setdefault(m["topic"], []).append({
                    "batchId": batch["batch_id"], "topic": m["topic"], "partition": int(m["partition"]),
                    "from": int(m["start"]), "until": int(m["until"])})
    return out


def _schema(pipeline: "Pipeline") -> schema_dataset.SchemaDatasetFacet | None:
    from offsetbatch.formats.ddl import ddl_fields

    cfg = pipeline.cfg
    if not cfg.value.schema_ddl:
        return None
    return schema_dataset.SchemaDatasetFacet(fields=[
        schema_dataset.SchemaDatasetFacetFields(name=name, type=kind) for name, kind in ddl_fields(cfg.value.schema_ddl)])


def task_lineage(pipeline: "Pipeline", plan: dict | None, commit: dict | None = None, outputs: bool = True):
    """The ``OperatorLineage`` of one task of a run: the offsets read (the ``commit`` result's
    batches if given, else the ``plan``'s), the sink's target and rejected datasets (``outputs``;
    with row counts once there is a ``commit`` result), and the run facet (kinds from the plan)."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    from offsetbatch.sinks.uris import kafka_dataset, kafka_topic_uri

    cfg = pipeline.cfg

    planned = list((plan or {}).get("batches") or [])
    batches = list((commit or {}).get("batches") or []) or planned
    schema = _schema(pipeline)
    inputs = []
    for topic, ranges in sorted(_ranges(batches).items()):
        namespace, name = kafka_dataset(kafka_topic_uri(cfg.kafka.conn_id, topic))
        inputs.append(InputDataset(namespace=namespace, name=name, facets={"schema": schema} if schema else {},
                                   inputFacets={"offsetbatch_offsets": OffsetRangesInputDatasetFacet(ranges=ranges)}))
    out = []
    if outputs and batches:
        sink = pipeline.sink
        for (namespace, name), rows in ((sink.lineage_dataset(), "rows_out"),
                                        (sink.rejected_lineage_dataset(), "rows_rejected")):
            facets = {"outputStatistics": output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                rowCount=int(commit.get(rows) or 0))} if commit else {}
            out.append(OutputDataset(namespace=namespace, name=name, outputFacets=facets))
    run = OffsetbatchRunFacet(pipeline=cfg.name, batches=[
        {"batchId": b["batch_id"], **({"kind": b["kind"]} if b.get("kind") else {}),
         **({"replays": b["target"]} if b.get("target") else {})} for b in planned or batches])
    return OperatorLineage(inputs=inputs, outputs=out, run_facets={"offsetbatch": run})
