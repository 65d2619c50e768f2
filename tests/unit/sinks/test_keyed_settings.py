"""The upsert settings both keyed sinks share (``sinks/keyed.py``): the job's check of the staged
columns fails the task at once, since only a config or transform change fixes it."""

from __future__ import annotations

import pytest

from offsetbatch.dag.retry_policy import is_permanent
from offsetbatch.errors import SinkSchemaError
from offsetbatch.sinks.keyed import RECORD_COLUMNS, KeyedSettings, check_staged

WHERE = "pipeline orders batch 7"
STAGED = {"order_id": "bigint", "lsn": "bigint", "deleted": "boolean", **{c: "bigint" for c in RECORD_COLUMNS}}


def _settings(**fields) -> KeyedSettings:
    return KeyedSettings(mode="upsert", key=["order_id"], version_column="lsn", delete_column="deleted", **fields)


def test_staged_columns_that_have_what_the_upsert_reads_pass():
    check_staged(_settings(), STAGED, WHERE)
    check_staged(KeyedSettings(), {"anything": "string"}, WHERE)  # append mode reads no key


@pytest.mark.parametrize("dtypes, says", [
    ({k: v for k, v in STAGED.items() if k != "lsn"}, "upsert column(s) lsn (sink.key, version_column"),
    ({k: v for k, v in STAGED.items() if k not in ("order_id", "deleted")}, "upsert column(s) order_id, deleted"),
    ({**STAGED, "deleted": "string"}, "delete_column 'deleted' is string, not boolean"),
])
def test_a_staged_batch_without_the_upserts_columns_fails_at_once_naming_them(dtypes, says):
    with pytest.raises(SinkSchemaError) as info:
        check_staged(_settings(), dtypes, WHERE)
    text = str(info.value)
    assert text.startswith(f"{WHERE}: ") and says in text and text.endswith("Nothing was committed."), text
    assert is_permanent(info.value)  # no retry: the config or the transform must change
