"""The monitor's ledger for its tests: real YAML configs and a real SQLite ledger, no Kafka.

``orders`` has three incremental batches (the first planned at an older sink path), a forward reset
by ``alice`` with a reason, the gap it left, and a batch that read on after the gap; ``lost``'s
ledger does not exist.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from offsetbatch.ledger import Ledger
from offsetbatch.model import Gap, OffsetRange, TopicPartition
from offsetbatch.monitor.sources import Sources
from offsetbatch.ops.status import pipeline_status


class NoKafka(Sources):
    """The monitor's sources with Kafka unreachable: the ledger side only."""

    def status(self, pipeline, ledger):
        st = pipeline_status(pipeline, ledger, None, batches=0)
        st.kafka_error = "no Kafka in unit tests"
        return st.to_dict()


def write_config(folder: Path, name: str, sink: Path, ledger: Path) -> None:
    (folder / f"{name}.yaml").write_text(f"name: {name}\nkafka: {{topics: [t]}}\nsink: {{path: {sink}}}\n"
                                         f"ledger: {{url: 'sqlite:///{ledger}'}}\n")


@pytest.fixture
def config_folder(tmp_path) -> Path:
    folder = tmp_path / "conf"
    folder.mkdir()
    for name, db in (("orders", tmp_path / "ledger.db"), ("lost", tmp_path / "gone.db")):
        write_config(folder, name, tmp_path / name, db)
    tp = TopicPartition("t", 0)
    with Ledger(f"sqlite:///{tmp_path}/ledger.db", create=True) as led:
        with led.lock("orders") as conn:
            led.start_partitions(conn, "orders", {tp: 0}, "earliest")

        def batch(n: int, start: int, path: str) -> None:
            with led.lock("orders") as conn:
                b = led.insert_batch(conn, "orders", "incremental", [OffsetRange("t", 0, start, start + 10, start)],
                                     dag_id="offsetbatch_orders", run_id=f"run_{n}", interval=(None, None),
                                     output_path=path, lag_at_plan=50)
                led.commit_batch(conn, b, {"rows_out": 10}, {})

        batch(0, 0, f"{tmp_path}/old_orders")
        batch(1, 10, f"{tmp_path}/orders")
        with led.lock("orders") as conn:
            led.record_gap(conn, "orders", Gap("t", 0, 20, 35, reason="reset"))
            led.move_frontier(conn, "orders", tp, 20, 35)
            led.event(conn, "orders", "frontier_reset", {"target": "latest", "reason": "bad deploy <b>", "moves": [
                {"topic": "t", "partition": 0, "frontier": 20, "to": 35, "direction": "forward"}]}, actor="alice")
        batch(2, 35, f"{tmp_path}/orders")
    return folder


@pytest.fixture
def add_pipeline(config_folder):
    """Install one more pipeline config, whose ledger is ``ledger``."""
    return lambda name, ledger: write_config(config_folder, name, config_folder.parent / name, ledger)


@pytest.fixture
def sources(config_folder) -> NoKafka:
    return NoKafka(str(config_folder))
