"""``offsetbatch doctor`` names an OpenLineage transport that refuses or never answers, and what it
costs each run (issue 41, case 15), against real sockets on 127.0.0.1: a closed port, a listener
that accepts and never reads, and an HTTP server. The provider's settings are read as it reads them."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time

import pytest

from offsetbatch.ops import doctor, lineage_transport
from offsetbatch.ops.lineage_transport import TransportBound, bound_of, probe

DEFAULTS = TransportBound(execution_timeout=10, timeout=5.0, retries=5)


def test_the_bound_follows_the_provider_and_client_settings():
    assert bound_of({"type": "http", "url": "http://x"}, 10) == DEFAULTS
    assert DEFAULTS.per_event == 13  # execution_timeout + the provider's 3 s grace, under 6 tries x 5 s
    tight = bound_of({"type": "http", "url": "http://x", "timeout": 1, "retry": {"total": 1}}, 3)
    assert (tight.per_event, tight.per_event * lineage_transport.EVENTS_PER_RUN) == (2, 16)


def test_a_refusing_transport_is_named_with_the_cost_per_run():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RuntimeError) as err:
        probe(f"http://127.0.0.1:{port}/api/v1/lineage", DEFAULTS)
    assert str(err.value) == (
        f"the OpenLineage transport http://127.0.0.1:{port}/api/v1/lineage cannot be reached (connection refused): "
        "runs stay green but slow, because each of a run's 8 lineage events (start and end of each task and of the "
        "DAG run) waits at most 13 s for a transport that does not answer (timeout 5 s x 6 tries, cut at "
        "[openlineage] execution_timeout 10 s): up to 104 s per run")


def test_a_transport_that_accepts_and_never_answers_is_found_in_the_probe_time():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # the kernel completes the handshake; nobody ever reads
        port = listener.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="accepted the connection and sent nothing within 3 s: runs stay "
                                               "green but slow"):
            probe(f"http://127.0.0.1:{port}/api/v1/lineage", DEFAULTS)
        assert time.monotonic() - started < lineage_transport.PROBE_CONNECT_S + lineage_transport.PROBE_READ_S + 1


def test_an_answering_transport_passes_and_the_doctor_reads_the_providers_settings(monkeypatch):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802 - http.server's naming
            self.send_response(405)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    transport = {"type": "http", "url": f"http://127.0.0.1:{server.server_port}", "timeout": 1, "retry": {"total": 1}}
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__DISABLED", "False")
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps(transport))
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT", "3")
    try:  # the provider caches its settings, except under pytest (its conf.py)
        [check] = [c for c in doctor.run_checks({}) if c.name == "openlineage transport"]
    finally:
        server.shutdown()
    assert check.ok, check.detail
    assert check.detail.startswith(f"http://127.0.0.1:{server.server_port}/api/v1/lineage answers (HTTP 405 in ")
    assert check.detail.endswith("each of a run's 8 lineage events (start and end of each task and of the DAG run) "
                                 "waits at most 2 s for a transport that does not answer (timeout 1 s x 2 tries, cut "
                                 "at [openlineage] execution_timeout 3 s): up to 16 s per run")
