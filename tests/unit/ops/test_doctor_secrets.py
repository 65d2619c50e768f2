"""``offsetbatch doctor`` never prints a URL's password, in a finding or in a failure (issue 41,
case 9). Logic only: the ledger is made missing or unreachable by the Pipeline's opener, so no
PostgreSQL server is involved in what is printed."""

from __future__ import annotations

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
