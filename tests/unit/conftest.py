"""Fixtures the unit tests of several folders share."""

from __future__ import annotations

import pytest


@pytest.fixture
def bucket():
    """An S3 bucket ``lake`` the project's storage layer reaches, held in fsspec's memory
    filesystem: the object-store code paths (no rename, manifests as the publication) without a
    server (the S3 API itself is tests/integration/sinks/test_object_storage.py's, on S3Proxy)."""
    import fsspec

    from offsetbatch import storage

    fs = fsspec.filesystem("memory")
    fs.store.clear()
    fs.pseudo_dirs.clear()
    fs.pseudo_dirs.append("")
    storage.register_s3("lake", fs)
    yield fs
    storage._s3_buckets.pop("lake", None)
