"""A stand-in for the Confluent Schema Registry, for tests: no real registry can run here
(Confluent's Schema Registry is not on Maven Central, Karapace is not on PyPI).

It implements the documented Confluent Schema Registry REST routes that confluent-kafka 2.16.1's
``SchemaRegistryClient`` and ``AvroSerializer`` (auto-register, lookup) call, with the real
registry's answers and error bodies (``{"error_code": 40403, "message": "Schema not found"}``):

    POST /subjects/{subject}/versions            register (the same schema gets the same id and GUID)
    POST /subjects/{subject}                     look a schema up in a subject
    GET  /schemas/ids/{id}                       a schema by id (with its GUID)
    GET  /schemas/guids/{guid}                   a schema by GUID (the header form's lookup)
    GET  /subjects/{subject}/versions/{v|latest} one version of a subject
    GET  /subjects/{subject}/versions            a subject's versions
    GET  /subjects                               every subject
    GET  /associations/resources/{ns}/{name}     a topic's associated subjects: always none here, so
                                                 2.16.1's default subject name strategy (ASSOCIATED,
                                                 asked first) falls back to TopicNameStrategy

The serializer calls no config route (nor /schemas/types) in 2.16.1.

Protobuf schemas (``confluent-protobuf``) are served as the real registry serves them: the schema
text with ``"schemaType": "PROTOBUF"`` and its ``references`` (``[{"name": <import name>, "subject":
..., "version": ...}]``: other subjects' versions the schema imports), on the same routes; a schema
is the same one when its text, type and references are (so a lookup compares all three). Not
served: ``?format=serialized`` (the real registry's base64 ``FileDescriptorProto`` form, which
confluent-kafka's Protobuf serializer asks for with ``use.latest.version``): the stand-in answers
with what was registered, and the Python serializer's auto-registration registers that form itself.
Every schema gets a GUID (uuid4) as Confluent Platform 8 assigns one: the 2.16.1 serializer's header
form writes it. Options: required basic-auth credentials or bearer token (401, error_code 401, as the
real registry answers), TLS with a given certificate and key, ``answer_with`` (every request gets
that HTTP status: 500, 503, 403), ``answer_html`` (every request gets 200 and a web page, as a URL
pointing at a proxy's or a UI's page does) and ``stop()`` (the port then refuses connections). ``requests``
logs every request the server read, for tests that assert what was called (or that nothing was).
Bound to 127.0.0.1 on a free port (or ``port``); the socket listens once the constructor returns.

Run as a program, it serves until SIGTERM or SIGINT, for ``make demo FORMAT=avro`` (still a stand-in,
not a registry to deploy)::

    python tests/schema_registry_server.py [--port 0] [--port-file PATH]

``--port-file`` gets the registry's URL (``http://127.0.0.1:PORT``) once the socket listens, written
whole (a temporary file renamed), so a reader that sees the file can connect at once.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import ssl
import sys
import threading
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


@dataclass
class _Schema:
    id: int
    guid: str
    schema_type: str
    schema: str
    references: list[dict[str, Any]] = field(default_factory=list)

    def body(self) -> dict[str, Any]:
        """The real registry's schema fields: ``schemaType`` is left out for AVRO, as it does."""
        out: dict[str, Any] = {"schema": self.schema, "guid": self.guid}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = self.references
        return out


class _ApiError(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class SchemaRegistryServer:
    """A registry in a daemon thread; use as a context manager or call ``stop()``."""

    def __init__(self, *, basic_auth: tuple[str, str] | None = None, bearer_token: str | None = None,
                 tls: tuple[Path, Path] | None = None, port: int = 0) -> None:
        self.basic_auth, self.bearer_token = basic_auth, bearer_token
        self.answer_with: int | None = None
        self.answer_html = False
        self.requests: list[tuple[str, str]] = []  # (method, path with query)
        self._schemas: list[_Schema] = []
        self._subjects: dict[str, list[int]] = {}  # subject -> schema ids, version n at index n-1
        self._deleted: set[tuple[str, int]] = set()  # soft-deleted (subject, version)
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._httpd.daemon_threads = True
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(certfile=str(tls[0]), keyfile=str(tls[1]))
            self._httpd.socket = ctx.wrap_socket(self._httpd.socket, server_side=True)
        self.port = self._httpd.server_address[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="schema-registry", daemon=True)
        self._thread.start()

    def __enter__(self) -> SchemaRegistryServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop serving and close the socket: the port refuses connections from now on."""
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join()

    # ---- the registry's state -------------------------------------------------------------------

    def register(self, subject: str, schema: str, schema_type: str = "AVRO",
                 references: list[dict[str, Any]] | None = None) -> _Schema:
        """Register ``schema`` under ``subject`` (also what POST /subjects/{subject}/versions does)."""
        refs = references or []
        with self._lock:
            found = next((s for s in self._schemas if (s.schema, s.schema_type, s.references) == (schema, schema_type, refs)), None)
            if found is None:
                found = _Schema(len(self._schemas) + 1, str(uuid.uuid4()), schema_type, schema, refs)
                self._schemas.append(found)
            versions = self._subjects.setdefault(subject, [])
            if found.id not in versions:
                versions.append(found.id)
            return found

    def soft_delete(self, subject: str, version: int) -> None:
        """What ``DELETE /subjects/{subject}/versions/{version}`` does: the version is no longer
        listed or served by subject and version, while its schema id still resolves."""
        with self._lock:
            self._deleted.add((subject, version))

    def _by_id(self, schema_id: int) -> _Schema:
        if not 1 <= schema_id <= len(self._schemas):
            raise _ApiError(404, 40403, "Schema not found")
        return self._schemas[schema_id - 1]

    def _version(self, subject: str, version: str) -> tuple[int, _Schema]:
        versions = self._subjects.get(subject)
        live = [n for n in range(1, len(versions or []) + 1) if (subject, n) not in self._deleted]
        if not live:
            raise _ApiError(404, 40401, f"Subject '{subject}' not found.")
        if version == "latest" or version == "-1":
            return live[-1], self._by_id(versions[live[-1] - 1])
        if not version.isdigit() or int(version) < 1:
            raise _ApiError(422, 42202, f"The specified version '{version}' is not a valid version id. Allowed "
                                        f"values are between [1, 2^31-1] and the string \"latest\"")
        if int(version) > len(versions) or (subject, int(version)) in self._deleted:
            raise _ApiError(404, 40402, f"Version {version} not found.")
        return int(version), self._by_id(versions[int(version) - 1])

    # ---- HTTP -----------------------------------------------------------------------------------

    def _answer(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        parts = [unquote(p) for p in path.strip("/").split("/")]
        match (method, parts):
            case ("POST", ["subjects", subject, "versions"]):
                assert body is not None
                s = self.register(subject, body["schema"], body.get("schemaType", "AVRO"), body.get("references"))
                version = self._subjects[subject].index(s.id) + 1
                return {"id": s.id, "subject": subject, "version": version, **s.body()}
            case ("POST", ["subjects", subject]):
                assert body is not None
                if subject not in self._subjects:
                    raise _ApiError(404, 40401, f"Subject '{subject}' not found.")
                for version, schema_id in enumerate(self._subjects[subject], 1):
                    s = self._by_id(schema_id)
                    if (s.schema, s.schema_type, s.references) == (body["schema"], body.get("schemaType", "AVRO"),
                                                                   body.get("references") or []):
                        return {"id": s.id, "subject": subject, "version": version, **s.body()}
                raise _ApiError(404, 40403, "Schema not found")
            case ("GET", ["schemas", "ids", schema_id]) if schema_id.isdigit():
                return self._by_id(int(schema_id)).body()
            case ("GET", ["schemas", "guids", guid]):
                s = next((s for s in self._schemas if s.guid == guid), None)
                if s is None:
                    raise _ApiError(404, 40403, "Schema not found")
                return {"id": s.id, **s.body()}
            case ("GET", ["subjects", subject, "versions", version]):
                number, s = self._version(subject, version)
                return {"subject": subject, "version": number, "id": s.id, **s.body()}
            case ("GET", ["subjects", subject, "versions"]):
                if subject not in self._subjects:
                    raise _ApiError(404, 40401, f"Subject '{subject}' not found.")
                return [n for n in range(1, len(self._subjects[subject]) + 1) if (subject, n) not in self._deleted]
            case ("DELETE", ["subjects", subject, "versions", version]) if version.isdigit():
                self._version(subject, version)  # 404 for an unknown or deleted one
                self.soft_delete(subject, int(version))
                return int(version)
            case ("GET", ["subjects"]):
                return sorted(self._subjects)
            case ("GET", ["associations", "resources", _namespace, _name]):
                return []
        raise _ApiError(404, 404, "HTTP 404 Not Found")

    def _authorized(self, header: str | None) -> bool:
        if self.basic_auth is not None:
            expected = base64.b64encode(":".join(self.basic_auth).encode()).decode()
            return header == f"Basic {expected}"
        if self.bearer_token is not None:
            return header == f"Bearer {self.bearer_token}"
        return True

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            # HTTP/1.0 (http.server's default): one request per connection, so that after ``stop()`` no
            # kept-alive connection goes on answering and the port really refuses.
            def _serve(self, method: str) -> None:
                registry.requests.append((method, self.path))
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    if registry.answer_with is not None:
                        status = registry.answer_with
                        raise _ApiError(status, status * 100 + 1 if status >= 500 else status, HTTPStatus(status).phrase)
                    if not registry._authorized(self.headers.get("Authorization")):
                        raise _ApiError(401, 401, "Unauthorized")
                    body = json.loads(raw) if raw else None
                    status, payload = 200, registry._answer(method, urlsplit(self.path).path, body)
                except _ApiError as err:
                    status, payload = err.status, {"error_code": err.code, "message": err.message}
                data, kind = json.dumps(payload).encode(), CONTENT_TYPE
                if registry.answer_html:
                    status, kind = 200, "text/html; charset=utf-8"
                    data = b"<!DOCTYPE html><html><head><title>Sign in</title></head><body>Sign in</body></html>"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._serve("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._serve("POST")

            def do_DELETE(self) -> None:  # noqa: N802
                self._serve("DELETE")

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: ``requests`` logs
                pass

        return Handler


def main(argv: list[str] | None = None) -> int:
    """Serve on 127.0.0.1 until SIGTERM/SIGINT; the port file tells a starter the server is ready."""
    parser = argparse.ArgumentParser(description="A stand-in for the Confluent Schema Registry (tests and demo only).")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default 0: a free one)")
    parser.add_argument("--port-file", type=Path, help="write the URL here once listening")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with SchemaRegistryServer(port=args.port) as server:
        if args.port_file is not None:
            partial = args.port_file.with_name(args.port_file.name + ".tmp")
            partial.write_text(server.url + "\n")
            os.replace(partial, args.port_file)
        print(f"schema registry stand-in listening on {server.url}", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
