"""The secrets a Spark job needs, handed over from the spark_job task in a file only its user can read:
the Kafka connection's (SASL login, client key: ``KafkaClientConfig.spark_secrets``) and an object
store's (``S3Settings.hadoop_options``). Never in process arguments, the job spec or a manifest. The
task writes the file, the job reads it once at start and deletes it, the task removes its folder
after the run.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

from offsetbatch.errors import JobSecretsError

ARG = "--secrets"
OLD_ARG = "--kafka-secrets"  # its name before it carried an object store's keys too; still read


def write(secrets: dict[str, str]) -> Path:
    """A JSON file only this user can read (in a fresh 0700 folder). The caller removes it with
    ``remove`` when the job ends."""
    folder = Path(tempfile.mkdtemp(prefix="offsetbatch-job-"))
    path = folder / "job-secrets.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(secrets, out)
    return path


def remove(path: Path | None) -> None:
    if path is not None:
        shutil.rmtree(path.parent, ignore_errors=True)


def read(path: str) -> dict[str, str]:
    """The job's side: refuse anything but a regular file of this user that nobody else may read."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise JobSecretsError(f"job secrets file {path} does not exist: the spark_job task writes it on the host "
                              f"that runs the driver (client deploy mode) and removes it after the run. Re-run the "
                              f"task; a cluster deploy mode cannot receive it.") from None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise JobSecretsError(f"job secrets file {path} must be a regular file of this user with mode 0600 (it is "
                              f"mode {oct(st.st_mode & 0o777)}, owner uid {st.st_uid}); refusing it")
    with open(path) as f:
        return json.load(f)
