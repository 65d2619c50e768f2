"""The Spark Connect server a pipeline's job runs on, as a component that can fail.

A run is a session on a long-running server (``spark.runner: connect``, the default), so the
server's failures are the run's: the server is down, was killed mid-job, or accepts connections
and never answers (stopped, swapping, a wrong port that some other program listens on). Spark's
Connect client retries an unavailable server for about 10 minutes and waits on a silent one for as
long as its RPC deadlines (10 minutes and more), so the task would hang. Here the task asks first
(``ConnectServer.check``: a gRPC handshake within ``answer_timeout``), and while the job runs a
watchdog (``watched``) asks again every ``PROBE_EVERY_S``: a server that refuses connections twice
in a row, or has not answered for ``answer_timeout``, ends the session's channel, so the job's call
fails at once and the task fails with ``SparkConnectServerError`` naming the server. Nothing was
committed; Airflow's retry (or the next run) re-executes the same batches with the same ranges
(the commit protocol), on the server once it is back.

``answer_timeout`` is the connection's extra ``answer_timeout`` (seconds, default 30): how long a
live server may be silent (a long JVM pause) before the task gives up on it.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator
from urllib.parse import urlparse

from offsetbatch.errors import ConfigError, SparkConnectServerError

log = logging.getLogger(__name__)

ANSWER_TIMEOUT_S = 30.0
PROBE_EVERY_S = 1.0
DEFAULT_PORT = 15002
LOCAL_FIX = "offsetbatch-stack spark-connect start"


@dataclass(frozen=True)
class ConnectServer:
    conn_id: str
    url: str  # sc://host:port/;params, which may hold a token: never printed
    host: str
    port: int
    answer_timeout: float = ANSWER_TIMEOUT_S

    @classmethod
    def from_connection(cls, conn_id: str, field: str = "spark.connect_conn_id") -> "ConnectServer":
        """The server of Airflow connection ``conn_id`` (type ``spark_connect``); an undefined one is
        a ``ConfigError`` that says how to define it or leave the server."""
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        from offsetbatch.connections import get_connection

        try:
            conn = get_connection(conn_id, field)
        except ConfigError as exc:
            raise ConfigError(f"{exc} The job runs on a Spark Connect server unless spark.runner is 'spark-submit' "
                              f"(locally: '{LOCAL_FIX}', and scripts/env.sh defines spark_connect_default).") from None
        try:
            timeout = float(conn.extra_dejson.get("answer_timeout", ANSWER_TIMEOUT_S))
        except (TypeError, ValueError):
            timeout = -1.0
        if timeout <= 0:
            raise ConfigError(f"{field}: the extra 'answer_timeout' of Airflow connection '{conn_id}' must be a "
                              f"positive number of seconds, got {conn.extra_dejson.get('answer_timeout')!r}")
        url = SparkConnectHook(conn_id).get_connection_url()
        parsed = urlparse(url.replace("sc://", "http://", 1))
        return cls(conn_id=conn_id, url=url, host=parsed.hostname or "localhost", port=parsed.port or DEFAULT_PORT,
                   answer_timeout=timeout)

    def describe(self) -> str:
        return f"Spark Connect server {self.host}:{self.port} (Airflow connection {self.conn_id})"

    def probe(self, timeout: float) -> str | None:
        """None when the server completes a gRPC handshake within ``timeout``; else what it did."""
        import grpc
        from pyspark.sql.connect.client import DefaultChannelBuilder

        try:
            socket.create_connection((self.host, self.port), timeout=timeout).close()
        except ConnectionRefusedError:
            return "refused the connection: nothing listens there"
        except OSError as exc:
            return f"could not be reached ({exc.strerror or type(exc).__name__})"
        # A connection of its own: gRPC would otherwise hand this channel the job's connection (its
        # global subchannel pool), which a stopped server keeps open until keepalive gives up (minutes).
        channel = DefaultChannelBuilder(self.url, [("grpc.use_local_subchannel_pool", 1)]).toChannel()
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
            return None
        except grpc.FutureTimeoutError:
            return f"accepted the connection but did not answer within {timeout:g}s"
        finally:
            channel.close()

    def error(self, what: str) -> SparkConnectServerError:
        return SparkConnectServerError(
            f"the {self.describe()} {what}. Start or restart it (locally: '{LOCAL_FIX}'; "
            f"'offsetbatch-stack spark-connect status'), or point the connection at a live server")

    def check(self) -> None:
        """Raise ``SparkConnectServerError`` unless the server answers within ``answer_timeout``."""
        problem = self.probe(self.answer_timeout)
        if problem:
            raise self.error(problem)


@contextmanager
def watched(server: ConnectServer, spark: Any) -> Iterator[None]:
    """Run the body (the job, on ``spark``, a session of ``server``) under a watchdog: when the server
    refuses connections twice in a row or has not answered for ``answer_timeout``, the session's
    channel is closed, so the body's call fails now rather than after the client's retries, and the
    failure is raised as ``SparkConnectServerError`` naming the server."""
    done = threading.Event()
    lost: list[str] = []

    def watch() -> None:
        last_answer, refused = time.monotonic(), 0
        while not done.wait(PROBE_EVERY_S):
            problem = server.probe(min(5.0, server.answer_timeout))
            if problem is None:
                last_answer, refused = time.monotonic(), 0
                continue
            refused = refused + 1 if problem.startswith("refused") else 0
            silent = time.monotonic() - last_answer
            if refused >= 2 or silent >= server.answer_timeout:
                lost.append(f"{problem} (unanswered for {silent:.0f}s while the job ran)")
                log.error("the %s went away mid-job: %s; ending the job's session", server.describe(), lost[0])
                try:
                    spark.client.close()  # every call on it fails at once: no retries against a lost server
                except Exception:  # noqa: BLE001 - closing is best effort; the job fails either way
                    log.debug("closing the Spark Connect channel failed", exc_info=True)
                return

    watchdog = threading.Thread(target=watch, name="spark-connect-watchdog", daemon=True)
    watchdog.start()
    try:
        yield
    except Exception as exc:
        if lost:
            raise server.error(lost[0]) from exc
        raise
    finally:
        done.set()  # a body that finished has its manifest: a server lost after it costs nothing
