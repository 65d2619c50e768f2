"""The transform cannot read the job's environment through Spark's variable substitution (issue 41,
case 8): ``${env:NAME}`` in transform.sql stays text unless transform.allow_system_access, on a real
Spark session, through the job's own transform step. (The config refuses such SQL at load too; this
is the job's own guard, for a spec written any other way.)"""

from __future__ import annotations

import os

import pytest

from offsetbatch.job.transform import analyzed_transform
from offsetbatch.jobspec import JobSpec

pytestmark = pytest.mark.integration
SQL = "SELECT '${env:HOME}' AS home, n FROM records"


def _spec(allowed: bool) -> JobSpec:
    return JobSpec(pipeline="contained", batch_id=1, output_id=1, bootstrap="x:1", ranges=[], sink={"path": "/t"},
                   transform_sql=SQL, transform_system_access=allowed)


@pytest.mark.parametrize("allowed", [False, True])
def test_env_substitution_is_off_unless_system_access_is_allowed(spark, allowed):
    records = spark.createDataFrame([(1,), (2,)], "n INT")
    try:
        rows = analyzed_transform(spark, records, _spec(allowed)).collect()
    finally:
        spark.conf.unset("spark.sql.variable.substitute")
    assert [r.n for r in rows] == [1, 2]
    expected = os.environ["HOME"] if allowed else "${env:HOME}"
    assert {r.home for r in rows} == {expected}
