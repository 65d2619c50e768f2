"""A sink on an S3 API (AWS S3, MinIO, Ceph, R2, S3Proxy): the settings of an Airflow ``aws``
connection, for both sides that touch the bucket.

* The commit side (Airflow tasks, the CLI) uses pyarrow's S3 filesystem, wrapped for fsspec
  (``storage``). pyarrow is already in the tree (the C++ AWS SDK, no botocore/aiobotocore pins to
  reconcile with Airflow's); s3fs would add both.
* The Spark side uses Hadoop's S3A (``hadoop-aws`` on the job's classpath, ``dag.spark_jars``): the
  same settings as ``fs.s3a.*`` options, set in the job's session, never in argv or the job spec.
  The secret ones travel in the job's private secrets file, as Kafka's do.

The connection is the Amazon provider's ``aws`` type, read without depending on the provider:
login = access key id, password = secret access key; extra ``endpoint_url``, ``region_name``,
``aws_session_token``, ``config_kwargs.s3.addressing_style`` (``path`` for most S3-compatible
stores), and offsetbatch's own ``s3a_options`` (more ``fs.s3a.*`` settings for Spark, verbatim).
Any other extra key is refused by name: a setting the provider would honour (a role to assume, a
profile) must not be silently ignored here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from pyarrow import fs as pafs

from offsetbatch.errors import StorageConnectionError, StorageUnreachableError
from offsetbatch.storage.locations import bucket_of

KNOWN_EXTRA = ("endpoint_url", "region_name", "aws_session_token", "config_kwargs", "s3a_options")
# The commit side's S3 client (pyarrow's, pyiceberg's too): how long to wait for a connection, and
# for the next byte of an answer (the AWS SDK's request timeout is curl's low-speed limit: a stall,
# not a total, so a large object is not cut short), and how many times to send a request. An
# endpoint that accepts and never answers costs CONNECT + ATTEMPTS x STALL seconds, not the SDK's
# default 3 x 60 s plus its backoff (200 s measured), before the task fails.
CONNECT_TIMEOUT_S = 5
STALL_TIMEOUT_S = 15
ATTEMPTS = 2


class CommitSideRetries(pafs.AwsStandardS3RetryStrategy):
    """``ATTEMPTS`` sends of a request; a class because pyiceberg builds its strategy from a path."""

    def __init__(self) -> None:
        super().__init__(max_attempts=ATTEMPTS)


SECRET_HADOOP_KEYS = ("fs.s3a.access.key", "fs.s3a.secret.key", "fs.s3a.session.token")
DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True)
class S3Settings:
    conn_id: str
    access_key: str = field(repr=False)
    secret_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)
    endpoint: str | None = None
    region: str = DEFAULT_REGION
    path_style: bool = False
    s3a_options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_connection(cls, conn_id: str, field_name: str = "sink.storage_conn_id") -> "S3Settings":
        from offsetbatch.connections import get_connection

        conn = get_connection(conn_id, field_name)
        return cls.from_fields(conn_id, conn.login, conn.password, conn.extra_dejson, field_name)

    @classmethod
    def from_fields(cls, conn_id: str, login: str | None, password: str | None, extra: dict[str, Any],
                    field_name: str = "sink.storage_conn_id") -> "S3Settings":
        where = f"{field_name}: Airflow connection '{conn_id}'"
        unknown = sorted(set(extra) - set(KNOWN_EXTRA))
        if unknown:
            raise StorageConnectionError(
                f"{where} has extra key(s) {', '.join(unknown)} that offsetbatch's S3 storage does not use (it reads "
                f"login, password and extra {', '.join(KNOWN_EXTRA)}; assumed roles and profiles are not supported). "
                f"Remove them; nothing was changed.")
        if not login or not password:
            raise StorageConnectionError(f"{where} needs the access key id as login and the secret access key as "
                                         f"password; nothing was changed.")
        style = ((extra.get("config_kwargs") or {}).get("s3") or {}).get("addressing_style", "auto")
        if style not in ("auto", "path", "virtual"):
            raise StorageConnectionError(f"{where}: config_kwargs.s3.addressing_style is {style!r}, not one of auto, "
                                         f"path, virtual.")
        options = extra.get("s3a_options") or {}
        bad = sorted(k for k in options if not str(k).startswith("fs.s3a.") or k in SECRET_HADOOP_KEYS)
        if bad:
            raise StorageConnectionError(f"{where}: s3a_options may only hold fs.s3a.* settings other than the "
                                         f"credentials (login/password carry those); remove {', '.join(bad)}.")
        endpoint = extra.get("endpoint_url") or None
        return cls(conn_id=conn_id, access_key=login, secret_key=password,
                   session_token=extra.get("aws_session_token") or None, endpoint=endpoint,
                   region=extra.get("region_name") or DEFAULT_REGION,
                   path_style=style == "path" or (style == "auto" and endpoint is not None),
                   s3a_options={str(k): str(v) for k, v in options.items()})

    # ---- Spark (Hadoop S3A) ----------------------------------------------------------------------

    def hadoop_options(self) -> dict[str, str]:
        """Every ``fs.s3a.*`` setting of this connection (secret ones included: only for the job's
        private secrets file or an in-process session), ``s3://`` served by S3A as well."""
        opts = {"fs.s3a.access.key": self.access_key, "fs.s3a.secret.key": self.secret_key,
                "fs.s3a.endpoint.region": self.region, "fs.s3a.path.style.access": str(self.path_style).lower(),
                "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}
        if self.session_token:
            opts["fs.s3a.session.token"] = self.session_token
            opts["fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        if self.endpoint:
            opts["fs.s3a.endpoint"] = self.endpoint
            opts["fs.s3a.connection.ssl.enabled"] = str(self.endpoint.startswith("https://")).lower()
        return {**opts, **self.s3a_options}

    @classmethod
    def from_hadoop_options(cls, options: dict[str, str], conn_id: str = "(job secrets)") -> "S3Settings":
        """The settings back from ``hadoop_options`` (the job's side, which has no Airflow connection)."""
        own = ("fs.s3a.access.key", "fs.s3a.secret.key", "fs.s3a.session.token", "fs.s3a.endpoint",
               "fs.s3a.endpoint.region", "fs.s3a.path.style.access", "fs.s3.impl", "fs.s3a.connection.ssl.enabled",
               "fs.s3a.aws.credentials.provider")
        return cls(conn_id=conn_id, access_key=options["fs.s3a.access.key"], secret_key=options["fs.s3a.secret.key"],
                   session_token=options.get("fs.s3a.session.token"), endpoint=options.get("fs.s3a.endpoint"),
                   region=options.get("fs.s3a.endpoint.region", DEFAULT_REGION),
                   path_style=options.get("fs.s3a.path.style.access") == "true",
                   s3a_options={k: v for k, v in options.items() if k not in own})

    def pyiceberg_properties(self) -> dict[str, str]:
        """pyiceberg's FileIO properties (its PyArrow FileIO, the same S3 client as ``filesystem``)."""
        self._checksums_when_required()
        props = {"s3.access-key-id": self.access_key, "s3.secret-access-key": self.secret_key, "s3.region": self.region,
                 "s3.force-virtual-addressing": str(not self.path_style and self.endpoint is not None).lower(),
                 "s3.connect-timeout": str(CONNECT_TIMEOUT_S), "s3.request-timeout": str(STALL_TIMEOUT_S),
                 "s3.retry-strategy-impl": f"{__name__}.CommitSideRetries"}
        if self.endpoint:
            props["s3.endpoint"] = self.endpoint
        if self.session_token:
            props["s3.session-token"] = self.session_token
        return props

    def _checksums_when_required(self) -> None:
        if self.endpoint:
            # S3-compatible stores rarely take the AWS SDK's default payload checksums (S3Proxy answers
            # XAmzContentSHA256Mismatch); checksums only where the API requires them, as S3A does by default.
            os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "WHEN_REQUIRED")

    # ---- Python (pyarrow) ----------------------------------------------------------------------

    def filesystem(self):
        """pyarrow's ``S3FileSystem`` for these settings, wrapped for fsspec."""
        from fsspec.implementations.arrow import ArrowFSWrapper

        self._checksums_when_required()
        scheme, _, host = (self.endpoint or "").partition("://")
        return ArrowFSWrapper(pafs.S3FileSystem(
            access_key=self.access_key, secret_key=self.secret_key, session_token=self.session_token,
            region=self.region, endpoint_override=host or None, scheme=scheme or "https",
            force_virtual_addressing=not self.path_style and self.endpoint is not None,
            allow_delayed_open=True, connect_timeout=CONNECT_TIMEOUT_S, request_timeout=STALL_TIMEOUT_S,
            retry_strategy=CommitSideRetries()))


def translate_error(exc: OSError, where: str, bucket: str) -> Exception | None:
    """The error an S3 failure means, one per cause: what no retry fixes (no such bucket, refused
    credentials or permission) as ``StorageConnectionError``, an endpoint that did not answer as
    ``StorageUnreachableError``; ``None`` for anything else (a missing object, say)."""
    text = str(exc)
    first = text.splitlines()[0] if text else type(exc).__name__
    if "NO_SUCH_BUCKET" in text:
        return StorageConnectionError(f"{where}: bucket {bucket!r} does not exist. Create it, or fix the sink's "
                                      f"location (sink.path or sink.staging); nothing was changed.")
    if any(code in text for code in ("SIGNATURE_DOES_NOT_MATCH", "INVALID_ACCESS_KEY_ID", "ACCESS_DENIED",
                                     "Forbidden", "EXPIRED_TOKEN")):
        return StorageConnectionError(f"{where}: the store refused the credentials or the request ({first}). Fix the "
                                      f"connection's login/password, or grant s3:ListBucket, s3:PutObject, "
                                      f"s3:GetObject and s3:DeleteObject on the bucket; nothing was changed.")
    if any(sign in text for sign in ("SSL", "curlCode: 35", "wrong version number", "certificate")):
        # the AWS SDK's curl: a TLS handshake that failed (https:// to a plain HTTP port, a certificate
        # not trusted) is reported as a NETWORK_CONNECTION error too, but no retry fixes it
        return StorageConnectionError(f"{where}: the TLS handshake with the endpoint failed ({first}). Use "
                                      f"https:// only if the store serves TLS on that port, and a certificate this "
                                      f"host trusts; nothing was changed.")
    if "curlCode: 28" in text and "Operation too slow" in text:  # connected, then no byte for STALL_TIMEOUT_S
        # (curl's code 28 is also a connect timeout: that one is "did not answer" below)
        return StorageUnreachableError(f"{where}: the endpoint accepted the connection and then sent nothing for "
                                       f"{STALL_TIMEOUT_S} s, {ATTEMPTS} times ({first}). Check that endpoint_url "
                                       f"is the store's S3 API (not another service's port) and that the store is "
                                       f"not overloaded.")
    if "NETWORK_CONNECTION" in text or "Could not connect" in text or "timed out" in text.lower():
        return StorageUnreachableError(f"{where}: the endpoint did not answer ({first}). Check that the store is up "
                                       f"and the connection's endpoint_url is right.")
    return None


def check_bucket(settings: S3Settings, location: str) -> None:
    """Reach the bucket and write, read and delete one object under ``location``: ``doctor``'s check,
    one distinct error per cause (``translate_error``)."""
    bucket = bucket_of(location)
    where = f"{location} (connection '{settings.conn_id}', endpoint {settings.endpoint or 'AWS'})"
    probe = f"{location.partition('://')[2]}/_offsetbatch/.doctor-probe"
    fs = settings.filesystem()  # not the process's binding: a check must not replace it
    try:
        with fs.open(probe, "wb") as f:
            f.write(b"offsetbatch doctor probe")
        with fs.open(probe, "rb") as f:
            f.read()
        fs.rm(probe)
    except OSError as exc:
        raise (translate_error(exc, where, bucket)
               or StorageConnectionError(f"{where}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")) \
            from None
