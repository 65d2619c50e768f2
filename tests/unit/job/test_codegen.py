"""job.codegen: which batches run without generated code, and that the session is left as found.
The session is a stand-in holding settings (the logic only); the job's records are checked both
ways on a real Spark by tests/integration/spark/test_job_one_pass.py."""

from __future__ import annotations

import pytest

from offsetbatch.job import codegen


class _Conf:
    def __init__(self, values: dict[str, str]):
        self.values = dict(values)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.values.pop(key, None)


class _Session:
    def __init__(self, values: dict[str, str] | None = None):
        self.conf = _Conf(values or {})


def test_a_small_batch_runs_interpreted_and_the_session_gets_spark_s_defaults_back():
    spark = _Session()
    with codegen.for_batch(spark, codegen.SMALL_BATCH_RECORDS) as interpreted:
        assert interpreted
        assert spark.conf.values == codegen.INTERPRETED
        assert spark.conf.values["spark.sql.subexpressionElimination.enabled"] == "false"
    assert spark.conf.values == {}


def test_the_session_is_restored_when_the_batch_fails():
    spark = _Session()
    with pytest.raises(RuntimeError), codegen.for_batch(spark, 10):
        raise RuntimeError("the write failed")
    assert spark.conf.values == {}


def test_a_large_batch_keeps_generated_code_and_asks_nothing_of_the_session():
    spark = _Session()
    with codegen.for_batch(spark, codegen.SMALL_BATCH_RECORDS + 1) as interpreted:
        assert not interpreted
    assert spark.conf.values == {}


@pytest.mark.parametrize("chosen", [{"spark.sql.codegen.wholeStage": "false"},
                                    {"spark.sql.codegen.factoryMode": "CODEGEN_ONLY"},
                                    {"spark.sql.subexpressionElimination.enabled": "false"}])
def test_a_pipeline_that_chose_any_of_these_settings_keeps_them_all(chosen):
    spark = _Session(chosen)
    with codegen.for_batch(spark, 100) as interpreted:
        assert not interpreted
        assert spark.conf.values == chosen
    assert spark.conf.values == chosen


def test_defaults_spelled_explicitly_still_count_as_defaults():
    spark = _Session({"spark.sql.codegen.wholeStage": "TRUE", "spark.sql.codegen.factoryMode": "fallback"})
    with codegen.for_batch(spark, 100) as interpreted:
        assert interpreted
