"""``offsetbatch doctor`` never prints a URL's password, in a finding or in a failure (issue 41,
case 9), nor do the CLI's errors, in any spelling of a ledger URL or a spark.conf setting (issue 58,
item 2). No PostgreSQL server is involved: the ledger is made missing or unreachable by the
Pipeline's opener, or is at a port nothing listens on (127.0.0.1:1, refused at once)."""

from __future__ import annotations

import json

import pytest
import yaml

from offsetbatch.ledger import LedgerMissingError
from offsetbatch.ledger.errors import LedgerUnreachableError
from offsetbatch.ops import doctor
from offsetbatch.pipeline import Pipeline

URL = "postgresql+psycopg2://postgres:S3cr3tPw@db.example.internal:5432/ledger"


@pytest.fixture
def pipeline(tmp_path) -> Pipeline:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "p", "kafka": {"topics": ["t"]}, "sink": {"path": str(tmp_path / "t")},
                                    "ledger": {"url": URL}}))
    return Pipeline.load(path)


def test_a_missing_ledger_is_named_without_its_password(pipeline, monkeypatch):
    def missing(create=False):
        raise LedgerMissingError(f"no ledger at {URL}")
    monkeypatch.setattr(Pipeline, "ledger", lambda self, create=False: missing(create))
    found = doctor._ledger(pipeline)
    assert found == ("no ledger yet at postgresql+psycopg2://postgres:***@db.example.internal:5432/ledger; the first "
                     "run creates it (nothing published yet)")


def test_a_failed_check_is_reported_without_the_password(pipeline, monkeypatch):
    def unreachable(self, create=False):
        raise LedgerUnreachableError(f"cannot connect to {URL}: connection refused")
    monkeypatch.setattr(Pipeline, "ledger", unreachable)
    check = doctor._run("p: ledger", lambda: doctor._ledger(pipeline), "fix it")
    assert not check.ok and "S3cr3tPw" not in check.detail and "postgres:***@db.example.internal" in check.detail


# ---- issue 58, item 2: every spelling, through the CLI's real output ------------------------------

S = "S3cr3tPw"
UNREACHABLE = "ob_user@127.0.0.1:1/warehouse"  # refused at once: the errors name the ledger's URL
LEDGER_SPELLINGS = {
    "?password=": f"postgresql+psycopg2://{UNREACHABLE}?password={S}",
    "?sslpassword=": f"postgresql+psycopg2://{UNREACHABLE}?sslmode=require&sslpassword={S}",
    "&token=": f"postgresql+psycopg2://{UNREACHABLE}?sslmode=require&token={S}",
    ";password= (JDBC)": f"postgresql+psycopg2://{UNREACHABLE};password={S}",
    "user:password@": f"postgresql+psycopg2://ob_user:{S}@127.0.0.1:1/warehouse",
}
CONF_SPELLINGS = {
    "Azure account key": ("spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net", S),
    "JAAS password": ("spark.hadoop.kafka.sasl.jaas.config",
                      f'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="{S}";'),
    "JDBC URL password": ("spark.sql.catalog.lake.uri", f"jdbc:postgresql://db:5432/catalog?user=u&password={S}"),
}


def _folder(tmp_path, **settings):
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "p.yaml").write_text(yaml.safe_dump({"name": "p", "kafka": {"topics": ["t"]},
                                                   "sink": {"path": str(tmp_path / "t")}, **settings}))
    return folder


def _cli(capsys, folder, *args) -> tuple[int, str, str]:
    from offsetbatch.ops import cli

    code = cli.main(["--pipelines", str(folder), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def no_kafka(monkeypatch):
    """Kafka is not what these tests look at; an unreachable broker would cost seconds per pipeline."""
    monkeypatch.setattr(doctor, "_kafka", lambda pipeline: "not checked here")


@pytest.mark.parametrize("spelling", LEDGER_SPELLINGS)
def test_no_spelling_of_a_ledger_password_is_in_doctor_json_or_a_cli_error(tmp_path, capsys, no_kafka, spelling):
    folder = _folder(tmp_path, ledger={"url": LEDGER_SPELLINGS[spelling]})
    code, out, err = _cli(capsys, folder, "--json", "doctor")
    [ledger_check] = [c for c in json.loads(out) if c["name"] == "p: ledger"]
    assert code != 0 and not ledger_check["ok"] and "cannot reach the ledger at postgresql+psycopg2://" in \
        ledger_check["detail"], ledger_check
    assert S not in out + err
    for command in ("events", "batches", "maintain"):
        code, out, err = _cli(capsys, folder, command, "p")
        assert code != 0 and err.startswith("error: pipeline p: cannot reach the ledger at postgresql"), (command, err)
        assert S not in out + err, (command, err)


@pytest.mark.parametrize("spelling", CONF_SPELLINGS)
def test_a_secret_spark_setting_is_named_by_doctor_and_the_cli_without_its_value(tmp_path, capsys, spelling):
    key, value = CONF_SPELLINGS[spelling]
    folder = _folder(tmp_path, ledger={"url": f"sqlite:///{tmp_path}/ledger.db"}, spark={"conf": {key: value}})
    for args in (("--json", "doctor"), ("events", "p"), ("batches", "p"), ("maintain", "p")):
        code, out, err = _cli(capsys, folder, *args)
        assert code != 0 and f"{key} would put a secret on spark-submit's command line" in err, (args, err)
        assert S not in out + err, (args, err)
