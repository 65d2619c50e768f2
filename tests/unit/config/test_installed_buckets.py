"""Pipelines that share a Spark Connect server and one bucket share that server's one S3A client
for the bucket (tests/integration/security/test_connect_isolation.py shows the client's keys
serving another session): ``config.installed`` refuses the later of two that would write one bucket
there with different storage connections, and only those."""

from __future__ import annotations

import pytest
import yaml

from offsetbatch.config import installed


def _pipeline(folder, name: str, bucket: str, storage: str, connect: str | None) -> None:
    doc = {"name": name, "kafka": {"topics": [name]},
           "sink": {"path": f"s3a://{bucket}/tables/{name}", "storage_conn_id": storage},
           "spark": {"connect_conn_id": connect} if connect else {"runner": "spark-submit"}}
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(doc))


@pytest.mark.parametrize("b_bucket, b_storage, b_connect, refused", [
    ("lake", "s3_team_b", "spark_connect_shared", True),
    ("lake", "s3_team_a", "spark_connect_shared", False),  # one storage connection: one set of keys
    ("other", "s3_team_b", "spark_connect_shared", False),  # a bucket of its own
    ("lake", "s3_team_b", "spark_connect_b", False),  # a server of its own
    ("lake", "s3_team_b", None, False),  # spark-submit: a JVM of its own
], ids=["refused", "same-storage", "other-bucket", "other-server", "spark-submit"])
def test_two_storage_connections_to_one_bucket_on_one_connect_server_are_refused(tmp_path, b_bucket, b_storage,
                                                                                   b_connect, refused):
    _pipeline(tmp_path, "a_events", "lake", "s3_team_a", "spark_connect_shared")
    _pipeline(tmp_path, "b_events", b_bucket, b_storage, b_connect)
    found = installed.read(str(tmp_path))
    assert sorted(found.configs) == (["a_events"] if refused else ["a_events", "b_events"])
    if refused:
        assert found.errors == (
            f"{tmp_path}/b_events.yaml: pipeline 'b_events' writes bucket lake with storage connection 's3_team_b', "
            f"and pipeline 'a_events' ({tmp_path}/a_events.yaml) writes it with 's3_team_a', both on the Spark "
            f"Connect server of connection 'spark_connect_shared': the server keeps one S3A client per bucket, made "
            f"with the first session's credentials, so one would write with the other's keys. Give both the same "
            f"storage connection, or run one on a Connect server of its own or with spark-submit (only 'a_events' "
            f"is installed)",)
    else:
        assert found.errors == ()
