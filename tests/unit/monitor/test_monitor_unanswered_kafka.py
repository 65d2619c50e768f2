"""One pipeline whose Kafka accepts connections and never answers must not hold up the UI (issue 41,
case 12): its status says so after ``STATUS_TIMEOUT_S``, later pages show the same without asking the
cluster again for ``RETRY_AFTER_S``, and the other pipelines' rows are there. The cluster is a real
socket on loopback that accepts and stays silent (what a stuck broker or a wrong port looks like);
the ledger is the monitor tests' real SQLite one."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from offsetbatch.monitor import sources as sources_module
from offsetbatch.monitor.pages import Pages
from offsetbatch.monitor.sources import Sources


@pytest.fixture
def silent_broker():
    """A listener that accepts every connection and never sends a byte; counts what it accepted."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    server.close()


def test_a_silent_cluster_is_reported_within_the_bound_and_not_asked_again(config_folder, silent_broker, monkeypatch):
    port, accepted = silent_broker
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": f"127.0.0.1:{port}"}}))
    monkeypatch.setattr(sources_module, "STATUS_TIMEOUT_S", 2.0)
    site = Pages(Sources(str(config_folder)))
    first = site.pipelines()
    [row] = [r for r in first["pipelines"] if r["name"] == "orders"]
    assert row["status"]["kafka_error"] == (f"Kafka connection 'kafka_default' (PLAINTEXT, 127.0.0.1:{port}) did not answer "
                                              f"within 2 s")
    assert row["summary"]["last_batch"]["batch_id"] == 3, "the ledger side is shown all the same"
    assert accepted, "the status check did reach the silent cluster"

    again = site.pipelines()  # the next page: the same answer, from the failure kept for RETRY_AFTER_S
    [row] = [r for r in again["pipelines"] if r["name"] == "orders"]
    assert row["status"]["kafka_error"].startswith(
        f"Kafka connection 'kafka_default' (PLAINTEXT, 127.0.0.1:{port}) did not answer within 2 s (checked ")
    assert "asked again" in row["status"]["kafka_error"]
