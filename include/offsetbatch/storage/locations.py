"""What a location's URI says by itself: its scheme, whether it is on an S3 API, its bucket, whether
a folder move there is cheap. No I/O, so both the storage functions and the S3 settings use it."""

from __future__ import annotations

OBJECT_STORE_SCHEMES = ("s3a", "s3", "gs", "abfs", "abfss")
_S3_SCHEMES = ("s3a", "s3")


def is_s3(uri: str) -> bool:
    """On an S3 API (``s3a://`` or ``s3://``): needs ``sink.storage_conn_id``, Hadoop's S3A for Spark."""
    return scheme(uri) in _S3_SCHEMES


def scheme(uri: str) -> str:
    return uri.partition("://")[0].lower() if "://" in uri else "file"


def renames_are_cheap(uri: str) -> bool:
    """A folder move is one rename (local disks, HDFS), not a copy and a delete of every object."""
    return scheme(uri) not in OBJECT_STORE_SCHEMES


def bucket_of(uri: str) -> str:
    return uri.partition("://")[2].partition("/")[0]
