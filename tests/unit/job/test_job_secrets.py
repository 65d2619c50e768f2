"""The file the spark_job task hands the job its connections' secrets in (``offsetbatch.job_secrets``)."""

from __future__ import annotations

import os
import stat

import pytest

from offsetbatch import job_secrets
from offsetbatch.errors import JobSecretsError


def test_secrets_file_is_private_and_removed(tmp_path):
    path = job_secrets.write({"kafka.sasl.jaas.config": "x"})
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert job_secrets.read(str(path)) == {"kafka.sasl.jaas.config": "x"}
    os.chmod(path, 0o644)
    with pytest.raises(JobSecretsError, match=r"with mode 0600 \(it is mode 0o644"):
        job_secrets.read(str(path))
    job_secrets.remove(path)
    assert not path.parent.exists()
    with pytest.raises(JobSecretsError, match="does not exist"):
        job_secrets.read(str(path))
    link = tmp_path / "link.json"
    target = tmp_path / "target.json"
    target.write_text("{}")
    os.chmod(target, 0o600)
    link.symlink_to(target)
    with pytest.raises(JobSecretsError, match="must be a regular file of this user"):
        job_secrets.read(str(link))
