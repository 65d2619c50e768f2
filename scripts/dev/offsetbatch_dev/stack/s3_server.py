"""S3Proxy on a loopback port: a real S3 REST API (SigV4, multipart uploads, bulk deletes) for the
tests and the local stack, from one jar on Maven Central (``artifacts.fetch_s3proxy``).

Backend: jclouds' ``transient`` store (objects in the server's memory; a restart empties it). The
``filesystem`` backend spends 10 s retrying every delete of a folder marker whose folder still has
files (S3A deletes ``_temporary/0/`` before its contents: 10 s per Spark write), and
``filesystem-nio2`` lists objects without sizes, which S3A rejects. ``--backend filesystem`` keeps
objects on disk under ``$OFFSETBATCH_HOME/s3/data`` when that matters more than speed.

The credentials and the endpoint are written as an Airflow ``aws`` connection (owner-only JSON):
what a pipeline's ``sink.storage_conn_id`` names.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from offsetbatch.paths import local_dir
from offsetbatch_dev.stack import artifacts
from offsetbatch_dev.stack.processes import (StackProcessError, alive, launch, port_open, read_pid, require_free,
                                             stop_pid, wait_for)

DEFAULT_PORT = 19500
REGION = "us-east-1"


@dataclass
class S3Server:
    port: int = DEFAULT_PORT
    home: Path | None = None
    backend: str = "transient"
    buckets: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.home = Path(self.home or local_dir() / "s3")
        if self.backend not in ("transient", "filesystem"):
            raise StackProcessError(f"S3Proxy backend {self.backend!r} is not one of transient, filesystem")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.home / "s3proxy.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "s3proxy.log"

    @property
    def connection_file(self) -> Path:
        """The Airflow connection (type aws, JSON) of this server: endpoint and credentials."""
        return self.home / "aws.connection.json"

    def _credentials(self) -> tuple[str, str]:
        if self.connection_file.exists():
            conn = json.loads(self.connection_file.read_text())
            return conn["login"], conn["password"]
        return f"offsetbatch{secrets.token_hex(4)}", secrets.token_urlsafe(24)

    def connection(self) -> dict:
        """The connection as ``AIRFLOW_CONN_<ID>`` JSON takes it."""
        return json.loads(self.connection_file.read_text())

    def pid(self) -> int | None:
        pid = read_pid(self.pid_file)
        return pid if pid and alive(pid) else None

    def start(self) -> None:
        if self.pid():
            return
        require_free([self.port], "S3Proxy", "--port or S3_PORT")
        jar = artifacts.fetch_s3proxy()
        self.home.mkdir(parents=True, exist_ok=True)
        os.chmod(self.home, 0o700)
        key, secret = self._credentials()
        data = self.home / "data"
        data.mkdir(exist_ok=True)
        props = self.home / "s3proxy.properties"
        fd = os.open(props, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write("\n".join([
                f"s3proxy.endpoint={self.endpoint}",
                "s3proxy.authorization=aws-v2-or-v4",
                f"s3proxy.identity={key}",
                f"s3proxy.credential={secret}",
                # The AWS SDKs' newer checksum headers (x-amz-checksum-crc32 on DeleteObjects): S3Proxy
                # answers 501 for headers it does not know, S3 ignores none of them.
                "s3proxy.ignore-unknown-headers=true",
                f"jclouds.provider={self.backend}",
                "jclouds.identity=unused", "jclouds.credential=unused",
                f"jclouds.filesystem.basedir={data}",
                "",
            ]))
        extra = {"endpoint_url": self.endpoint, "region_name": REGION,
                 "config_kwargs": {"s3": {"addressing_style": "path"}}}
        fd = os.open(self.connection_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({"conn_type": "aws", "login": key, "password": secret, "extra": extra}, out)
        env = {**os.environ, "LOG_LEVEL": "warn"}
        proc = launch(["java", "-Xmx1g", "-jar", str(jar), "--properties", str(props)], self.log_file,
                      self.pid_file, env=env)
        wait_for(lambda: port_open(self.port), 60, proc, f"S3Proxy on {self.endpoint}", self.log_file)
        for bucket in self.buckets:
            self.create_bucket(bucket)

    def filesystem(self):
        """pyarrow's S3 filesystem on this server (the tests' own reader, not offsetbatch's)."""
        from pyarrow import fs as pafs

        os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "WHEN_REQUIRED")
        conn = self.connection()
        return pafs.S3FileSystem(access_key=conn["login"], secret_key=conn["password"], region=REGION,
                                 endpoint_override=f"127.0.0.1:{self.port}", scheme="http",
                                 allow_bucket_creation=True, allow_bucket_deletion=True)

    def create_bucket(self, bucket: str) -> None:
        self.filesystem().create_dir(bucket)

    def stop(self) -> None:
        pid = self.pid()
        if pid:
            stop_pid(pid, ports=[self.port])
        self.pid_file.unlink(missing_ok=True)
