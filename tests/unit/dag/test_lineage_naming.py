"""OpenLineage dataset naming of each sink's asset URI, and the ranges facet from a plan's range
strings (the event itself is checked in tests/integration/operations/test_lineage.py)."""

from __future__ import annotations

import pytest

from offsetbatch.dag.lineage import _ranges
from offsetbatch.sinks import uris


@pytest.mark.parametrize("naming, uri, expected", [
    (uris.location_dataset, "/data/tables/events", ("file", "/data/tables/events")),
    (uris.location_dataset, "file:///data/tables/events", ("file", "/data/tables/events")),
    (uris.location_dataset, "s3a://lake/tables/events", ("s3://lake", "tables/events")),
    (uris.location_dataset, "s3://lake/events", ("s3://lake", "events")),
    (uris.postgres_dataset, "postgres://db.internal:5432/analytics/public/events",
     ("postgres://db.internal:5432", "analytics.public.events")),
    (uris.kafka_dataset, "kafka://broker-1:9092/clean-events", ("kafka://broker-1:9092", "clean-events")),
    (uris.iceberg_dataset, "iceberg://lake/analytics/events", ("iceberg://lake", "analytics.events")),
])
def test_each_sinks_uri_gets_openlineages_naming(naming, uri, expected):
    """Each sink's ``lineage_dataset`` names its asset URI with its own of these."""
    assert naming(uri) == expected


def test_a_files_sink_names_its_table_and_its_rejected_folder():
    from offsetbatch.sinks import FilesSink

    sink = FilesSink.at("/data/tables/events")
    assert sink.lineage_dataset() == ("file", "/data/tables/events")
    assert sink.rejected_lineage_dataset() == ("file", "/data/tables/events/_rejected")


def test_ranges_are_grouped_per_topic_with_the_batch_id():
    batches = [{"batch_id": 3, "ranges": ["orders/0[10,20)", "orders.v2/1[0,5)"]},
               {"batch_id": 4, "ranges": ["orders/0[20,25)"]}]
    assert _ranges(batches) == {
        "orders": [{"batchId": 3, "topic": "orders", "partition": 0, "from": 10, "until": 20},
                   {"batchId": 4, "topic": "orders", "partition": 0, "from": 20, "until": 25}],
        "orders.v2": [{"batchId": 3, "topic": "orders.v2", "partition": 1, "from": 0, "until": 5}]}
