"""Pipelines share one Spark Connect server (issue 53): each run is a session of its own, and one
pipeline's credentials and settings are neither readable nor usable from another's session.

Two sessions on the suite's real Connect server, in a child process (a process holds one kind of
Spark session; the suite's in-process one is classic): A runs the job's session set-up
(``job.run.session_settings`` with an object store's keys, as ``run_batches`` does) and writes to
its bucket on a real S3 API (S3Proxy); B is another pipeline's session, with no keys or with keys
of its own. B tries what a pipeline can try: ``spark.conf.get`` of A's keys, ``SET``/``SET -v``,
Spark SQL's ``${...}`` variable substitution; A's session settings must not change B's; A's key is
not in the server's log. (The suite's server runs without its UI, so its environment tab is not
read here; a session's settings are not SparkConf entries, which is all that tab lists.)

What the server does not isolate is shown too: Hadoop keeps one S3A client per bucket per JVM, made
with the first session's keys, and serves it to every session that opens the bucket. Turning that
cache off per session would isolate it, but leaks an AWS client and its threads per use (measured on
this server: about 120 threads per small write, 4,926 after 40; docs/architecture.md), so instead
``config.installed`` refuses two pipelines that would reach one bucket on one server with different
storage connections (tests/unit/config/test_installed_buckets.py). If a Spark release isolates the
client per session, the last assertion fails and that refusal can go."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

pytestmark = pytest.mark.integration

CHILD = r"""
import json, os, sys
from pyspark.sql import SparkSession
from offsetbatch.job.run import session_settings
from offsetbatch.storage.s3 import S3Settings

url, bucket = sys.argv[1], sys.argv[2]
conn = json.loads(os.environ["OFFSETBATCH_TEST_S3_CONN"])
keys = S3Settings.from_fields("s3", conn["login"], conn["password"], conn["extra"]).hadoop_options()
seen = {}

a = SparkSession.builder.remote(url).create()
for key, value in session_settings(keys).items():
    a.conf.set(key, value)
a.conf.set("spark.sql.shuffle.partitions", "7")
a.range(5).write.mode("overwrite").parquet(f"s3a://{bucket}/a")
seen["a_reads_its_own"] = a.read.parquet(f"s3a://{bucket}/a").count()

b = SparkSession.builder.remote(url).create()
seen["b_conf"] = {k: b.conf.get(k, None) for k in ("fs.s3a.access.key", "fs.s3a.secret.key")}
seen["b_set_v"] = [r[0] for r in b.sql("SET -v").collect() if r[0].startswith("fs.s3a")] + \
                  [r[0] for r in b.sql("SET").collect() if r[0].startswith("fs.s3a")]
b.conf.set("spark.sql.variable.substitute", "true")
seen["b_substitution"] = [b.sql(f"SELECT '${{{k}}}' AS v").collect()[0][0]
                          for k in ("fs.s3a.secret.key", "fs.s3a.endpoint")]
seen["b_shuffle_partitions"] = b.conf.get("spark.sql.shuffle.partitions")
own = {k: v for k, v in keys.items() if k not in ("fs.s3a.access.key", "fs.s3a.secret.key")}
for mode, extra in (("no keys", {}), ("keys of its own", {"fs.s3a.access.key": "pipeline-b",
                                                          "fs.s3a.secret.key": "not-a's-secret"})):
    for key, value in session_settings({**own, **extra}).items():
        b.conf.set(key, value)
    try:
        seen[mode] = b.read.parquet(f"s3a://{bucket}/a").count()
    except Exception as exc:
        seen[mode] = "refused: " + type(exc).__name__ + ": " + str(exc).splitlines()[0][:300]
a.stop()
b.stop()
print("SEEN " + json.dumps(seen))
"""


def test_another_pipelines_session_cannot_read_a_sessions_settings_but_shares_its_bucket_client(s3_server,
                                                                                                   spark_connect_server):
    bucket = f"iso-{uuid.uuid4().hex[:8]}"
    s3_server.create_bucket(bucket)
    conn = s3_server.connection()
    done = subprocess.run([sys.executable, "-c", CHILD, spark_connect_server.url, bucket], capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "OFFSETBATCH_TEST_S3_CONN": json.dumps(conn)})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.split("SEEN ", 1)[1])
    secret = conn["password"]
    assert seen["a_reads_its_own"] == 5
    assert seen["b_conf"] == {"fs.s3a.access.key": None, "fs.s3a.secret.key": None}
    assert seen["b_set_v"] == []
    # Spark substitutes a key that looks secret as "*********(redacted)", set or not; A's endpoint is not B's
    assert seen["b_substitution"] == ["*********(redacted)", ""] and secret not in json.dumps(seen)
    assert secret not in spark_connect_server.log_file.read_text(errors="replace")  # nor in the server's log
    assert seen["b_shuffle_partitions"] != "7"  # A's session settings do not change B's
    # the server-wide part: B's own (wrong) keys, or none, are not used for a bucket A's session opened
    assert (seen["no keys"], seen["keys of its own"]) == (5, 5), seen
