"""Secrets kept out of what offsetbatch prints, logs and renders: every credential-bearing part of a
URL or setting (a ledger's, an Iceberg catalog's, one pasted into a path or a ``spark.conf`` value)
becomes ``***``, whether the URL parses or not, so a mistyped URL does not echo its password into an
error, a DAG's import error or a page.

Masked: a URL's userinfo password (``user:password@``), and the value of any parameter whose name
says it is a secret, however it is written: a query (``?password=…&token=…``), a JDBC or ODBC
``;password=…``/``;PWD={…}``, a JAAS ``password="…"``, a libpq ``password = …``, a ``-D…Password=…``,
percent-encoded ``password%3D…`` (an ``odbc_connect``). ``url(text) != text`` is therefore also the
test of whether a value carries a credential (``holds_secret``, which classifies a setting).
"""

from __future__ import annotations

import re

# scheme (``jdbc:mysql:`` too), then any slashes (a mistyped ``postgresql+psycopg2:/user:pw@host``
# too), then user:password@ (Oracle's ``jdbc:oracle:thin:user/password@`` is masked whole)
_USERINFO = re.compile(r"(?P<head>(?:[A-Za-z][A-Za-z0-9+.\-]*:)+/*)(?P<user>[^:/@\s'\"]*):(?P<password>[^@\s'\"]+)@")

# A parameter name that says its value is a secret: one ending in one of these words (sslpassword,
# keyStorePassword, access_token, X-Amz-Security-Token, client_secret, AccountKey, SharedAccessKey),
# or in a URL's query a bare ``key`` (an API key) or ``sig`` (an Azure SAS's signature): a folder
# named ``key=eu`` (Hive's partitions) is not a secret. Not ``sslkey``/``keyfile``: a path.
_SECRET_WORDS = (r"password|passwd|pwd|secret|token|signature|credentials?"
                 r"|(?:api|account|access|private|secret|sharedaccess)[_\-]?key")
_PARAMETER = re.compile(
    r"(?i)(?<![\w.\-%])(?P<name>[\w.\-%]*?(?:" + _SECRET_WORDS + r")|(?<=[?&])(?:key|sig))"
    r"(?P<eq>[ \t]*(?:=|%3D)[ \t]*)"
    r"(?P<value>\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|\{[^}]*\}|[^\s&;\"']+)")


def _masked_value(m: re.Match) -> str:
    value = m["value"]
    quote = value[0] if value[0] in "\"'" else ""
    return f"{m['name']}{m['eq']}{quote}***{quote}"


def url(text: str) -> str:
    """``text`` with every URL password and every secret parameter's value replaced by ``***``.

    Idempotent (a masked text is unchanged), so ``url(v) != v`` says ``v`` carries a credential."""
    text = _USERINFO.sub(lambda m: f"{m['head']}{m['user']}:***@", text)
    return _PARAMETER.sub(_masked_value, text)


# A setting whose name says its value is a secret: S3A's secret.key and session.token, Spark's
# keyStorePassword, an Azure storage account's key (fs.azure.account.key.<account>.dfs.core.windows.net)
# or SAS (fs.azure.sas.*), S3's SSE-C encryption.key, a Kafka client's sasl.jaas.config (its login), a
# catalog's api-key or Authorization header.
_SECRET_NAME = re.compile(r"(?i)(password|passwd|secret|token|credential|signature|authorization|jaas"
                          r"|(access|private|account|encryption|api|sas)[._-]?key(?![a-z])|\.azure\.sas\.)")
_SECRET_KEPT_ELSEWHERE = re.compile(r"(?i)(credential\.provider\.path|password[._-]file)$")


def holds_secret(key: str, value: str = "") -> bool:
    """Whether setting ``key`` (a ``spark.conf`` entry) is a secret, by its name
    (``spark.hadoop.fs.s3a.secret.key``, ``…session.token``, ``spark.ssl.keyStorePassword``,
    ``fs.azure.account.key.<account>…``) or by its value, since no name check knows every setting:
    a value ``url`` would mask (a JDBC URL's ``password=``, a URL's ``user:password@``, a JAAS
    ``password="…"``). Some names say where a secret is kept, not the secret, and pass by name:
    Kubernetes' ``…secretKeyRef…`` and ``…secrets.<name>``, Hadoop's
    ``hadoop.security.credential.provider.path`` (the place for an Azure key) and a ``…password.file``."""
    if url(value) != value:
        return True
    if key.startswith("spark.kubernetes.") and ("secretKeyRef" in key or ".secrets." in key):
        return False
    return _SECRET_NAME.search(key) is not None and _SECRET_KEPT_ELSEWHERE.search(key) is None
