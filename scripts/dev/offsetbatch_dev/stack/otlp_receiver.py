"""An OpenTelemetry metrics receiver on 127.0.0.1, for tests: what a collector receives from
Airflow's metrics when the installation turns them on (``[metrics] otel_on``).

No collector binary is published on the registries this project installs from, so this implements
the documented OTLP/HTTP protocol (https://opentelemetry.io/docs/specs/otlp/#otlphttp): ``POST
/v1/metrics`` with a protobuf ``ExportMetricsServiceRequest`` (gzip-encoded or not), answered with
an empty ``ExportMetricsServiceResponse``. It decodes with the ``opentelemetry-proto`` package
Airflow's own exporter uses and keeps every gauge's data points by metric name.
"""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class OtlpMetricsReceiver:
    """Start with ``start()``; ``env()`` is what points Airflow's metrics at it."""

    def __init__(self) -> None:
        self._points: dict[str, list[float]] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> "OtlpMetricsReceiver":
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/metrics":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
                receiver._keep(request)
                answer = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:  # quiet: one request per process per second
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return self._server.server_address[1]

    def env(self, interval_ms: int = 1000) -> dict[str, str]:
        """Airflow's metrics on, over OTLP/HTTP to this receiver, exported every ``interval_ms``."""
        return {"AIRFLOW__METRICS__OTEL_ON": "True", "AIRFLOW__METRICS__OTEL_HOST": "127.0.0.1",
                "AIRFLOW__METRICS__OTEL_PORT": str(self.port), "AIRFLOW__METRICS__OTEL_SSL_ACTIVE": "False",
                "AIRFLOW__METRICS__OTEL_INTERVAL_MILLISECONDS": str(interval_ms)}

    def _keep(self, request) -> None:  # noqa: ANN001 - a protobuf message
        with self._lock:
            for resource in request.resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        if metric.WhichOneof("data") == "gauge":
                            self._points.setdefault(metric.name, []).extend(
                                p.as_double if p.WhichOneof("value") == "as_double" else float(p.as_int)
                                for p in metric.gauge.data_points)

    def gauge(self, name: str) -> list[float]:
        """Every value received for gauge ``name``, in arrival order."""
        with self._lock:
            return list(self._points.get(name, []))

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._points)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
