"""``redact.url``, the one masking function every printer of a URL calls, and ``redact.holds_secret``,
the one classifier of a ``spark.conf`` entry (issue 58, item 2): every credential-bearing spelling is
masked or classified, and what carries none is left exactly as it is."""

from __future__ import annotations

import pytest

from offsetbatch import redact

S = "S3cr3tPw"


@pytest.mark.parametrize("text, masked", [
    # a URL's userinfo, a mistyped one, JDBC's and Oracle's
    (f"postgresql+psycopg2://u:{S}@h/db", "postgresql+psycopg2://u:***@h/db"),
    (f"postgresql+psycopg2:/u:{S}@h/db", "postgresql+psycopg2:/u:***@h/db"),
    (f"jdbc:mysql://u:{S}@h/db", "jdbc:mysql://u:***@h/db"),
    (f"jdbc:oracle:thin:scott/{S}@h:1521/svc", "jdbc:oracle:thin:***@h:1521/svc"),
    # query parameters, whatever their case
    (f"postgresql+psycopg2://u@h/db?password={S}", "postgresql+psycopg2://u@h/db?password=***"),
    (f"postgresql+psycopg2://u@h/db?sslmode=require&sslpassword={S}&x=1",
     "postgresql+psycopg2://u@h/db?sslmode=require&sslpassword=***&x=1"),
    (f"https://h/x?a=1&token={S}", "https://h/x?a=1&token=***"),
    (f"https://h/x?Access_Token={S}#f", "https://h/x?Access_Token=***"),
    (f"https://h/x?client_secret={S}&PWD={S}", "https://h/x?client_secret=***&PWD=***"),
    (f"https://h/x?apikey={S}", "https://h/x?apikey=***"),
    (f"https://maps.example/x?key={S}", "https://maps.example/x?key=***"),
    (f"https://a.blob.core.windows.net/c?sv=2020&sig={S}%3D&se=x", "https://a.blob.core.windows.net/c?sv=2020&sig=***&se=x"),
    # JDBC/ODBC ;-lists, braces, percent-encoded (odbc_connect)
    (f"jdbc:sqlserver://h:1433;user=u;password={S};encrypt=true", "jdbc:sqlserver://h:1433;user=u;password=***;encrypt=true"),
    (f"jdbc:sqlserver://h;PWD={{{S};x}}", "jdbc:sqlserver://h;PWD=***"),
    (f"mssql+pyodbc:///?odbc_connect=DRIVER%3D%7BODBC%7D%3BPWD%3D{S}", "mssql+pyodbc:///?odbc_connect=DRIVER%3D%7BODBC%7D%3BPWD%3D***"),
    (f"DefaultEndpointsProtocol=https;AccountName=a;AccountKey={S}==;EndpointSuffix=core.windows.net",
     "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=***;EndpointSuffix=core.windows.net"),
    # JAAS (quoted, an escaped quote inside), libpq's key = value, a JVM option
    (f'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="{S} \\" x";',
     'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="***";'),
    (f"host=h dbname=d password = {S} sslmode=require", "host=h dbname=d password = *** sslmode=require"),
    (f"-Djavax.net.ssl.keyStorePassword={S} -Dx=y", "-Djavax.net.ssl.keyStorePassword=*** -Dx=y"),
    # inside a message, quoted by repr
    (f"'postgresql://u@h/db?password={S}' is not a SQLAlchemy URL", "'postgresql://u@h/db?password=***' is not a SQLAlchemy URL"),
])
def test_every_spelling_of_a_credential_is_masked(text, masked):
    assert redact.url(text) == masked
    assert redact.url(masked) == masked  # idempotent: ``url(v) != v`` means v carries a credential


@pytest.mark.parametrize("text", [
    "sqlite:////var/lib/offsetbatch/ledger.db", "postgresql+psycopg2://u@h:5432/db?sslmode=require",
    "s3a://bucket/events", "spark.sql.shuffle.partitions=4", "kafka.key=x monkey=y sslkey=/etc/k.pem keyfile=/k",
    "-Djava.security.auth.login.config=/etc/jaas.conf", "http://proxy:3128", "user@example.org",
    "s3a://lake/tables/orders/key=eu/sig=1", "/data/orders/region=eu",  # Hive-style folders
])
def test_what_carries_no_credential_is_left_as_it_is(text):
    assert redact.url(text) == text


@pytest.mark.parametrize("key, value", [
    # by name (the names of issue 41, and those its check missed)
    ("spark.hadoop.fs.s3a.secret.key", "x"), ("spark.hadoop.fs.s3a.session.token", "x"),
    ("spark.ssl.keyStorePassword", "x"), ("spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net", S),
    ("spark.hadoop.fs.azure.account.key.acct.blob.core.windows.net", S),
    ("spark.hadoop.fs.azure.sas.container.acct.blob.core.windows.net", S), ("spark.hadoop.fs.s3a.encryption.key", S),
    ("spark.kafka.sasl.jaas.config", "x"), ("spark.sql.catalog.c.header.Authorization", f"Bearer {S}"),
    ("spark.sql.catalog.c.s3.access-key-id", S), ("spark.hadoop.fs.gs.auth.service.account.private.key", S),
    # by value, whatever the name
    ("spark.sql.catalog.lake.uri", f"jdbc:postgresql://db/cat?user=u&password={S}"),
    ("spark.hadoop.javax.jdo.option.ConnectionURL", f"jdbc:sqlserver://h;user=u;password={S}"),
    ("spark.hadoop.some.login", f'org.apache.kafka.common.security.scram.ScramLoginModule required password="{S}";'),
    ("spark.driver.extraJavaOptions", f"-Djavax.net.ssl.trustStorePassword={S}"),
    ("spark.sql.catalog.rest.uri", f"https://u:{S}@catalog.example/api"),
    ("spark.kubernetes.driver.secretKeyRef.PW", f"jdbc:postgresql://db/x?password={S}"),  # a value outranks the ref
])
def test_a_secret_setting_is_classified_by_its_name_or_its_value(key, value):
    assert redact.holds_secret(key, value)


@pytest.mark.parametrize("key, value", [
    ("spark.sql.shuffle.partitions", "4"), ("spark.kubernetes.driver.secretKeyRef.PW", "db-secret:password"),
    ("spark.kubernetes.executor.secrets.spark-secret", "/etc/secrets"),
    ("spark.hadoop.fs.azure.account.keyprovider.acct.dfs.core.windows.net", "org.apache.hadoop.fs.azure.ShellDecryptionKeyProvider"),
    ("spark.hadoop.fs.azure.account.auth.type", "OAuth"), ("spark.sql.catalog.lake.uri", "jdbc:postgresql://db/cat?user=u"),
    ("spark.driver.extraJavaOptions", "-Djava.security.auth.login.config=/etc/jaas.conf"),
    ("spark.hadoop.hadoop.security.credential.provider.path", "jceks://hdfs/user/x/azure.jceks"),
    ("spark.hadoop.hadoop.security.credstore.java-keystore-provider.password-file", "/etc/hadoop/ks.pass"),
])
def test_an_ordinary_setting_is_not_a_secret(key, value):
    assert not redact.holds_secret(key, value)
