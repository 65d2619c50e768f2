"""Trigger parameters: shape checks that fail before the ledger is opened, naming the bad value."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from offsetbatch.errors import RunRequestError
from offsetbatch.model import TopicPartition
from offsetbatch.run_request import from_params, run_interval

T0 = datetime(2026, 11, 20, 13, tzinfo=timezone.utc)


def test_defaults_and_scheduled_runs_read_next():
    assert from_params("p", None).mode == "next"
    assert from_params("p", {"mode": "next", "dry_run": True}).mode == "next"


def test_backfill_runs_backfill_their_interval_whatever_the_params():
    req = from_params("p", {"mode": "reset", "reset_to": "latest"}, run_type="backfill", interval=(T0, T0.replace(hour=14)))
    assert (req.mode, req.window) == ("backfill", (T0, T0.replace(hour=14)))


def test_replay_window_and_batch_ids():
    req = from_params("p", {"mode": "replay", "replay_start": "2026-11-20T13:00:00Z", "replay_end": "2026-11-20T15:00:00+00:00"})
    assert req.window == (T0, T0.replace(hour=15))
    assert from_params("p", {"mode": "replay", "batch_ids": "7, 3,3"}).batch_ids == (3, 7)


def test_reset_targets():
    assert from_params("p", {"mode": "reset", "reset_to": "earliest"}).reset_to.kind == "earliest"
    req = from_params("p", {"mode": "reset", "reset_to": '{"t": {"0": 5, "1": 0}}', "dry_run": False})
    assert req.reset_to.offsets == {TopicPartition("t", 0): 5, TopicPartition("t", 1): 0} and not req.dry_run
    assert from_params("p", {"mode": "reset", "reset_to": "2026-11-20T13:00:00+00:00"}).reset_to.timestamp == T0
    assert from_params("p", {"mode": "reset", "reset_to": "latest"}).dry_run  # dry run unless told otherwise


@pytest.mark.parametrize("params, message", [
    ({"mode": "rewind"}, "mode 'rewind' is not one of"),
    ({"mode": "replay"}, "needs batch_ids, or both replay_start and replay_end"),
    ({"mode": "replay", "replay_start": "2026-11-20T15:00:00+00:00", "replay_end": "2026-11-20T13:00:00+00:00"},
     "is not after its start"),
    ({"mode": "replay", "replay_start": "2026-11-20T13:00:00", "replay_end": "2026-11-20T15:00:00+00:00"}, "has no timezone"),
    ({"mode": "replay", "batch_ids": "3,x"}, "batch_ids has 'x'"),
    ({"mode": "replay", "batch_ids": "3", "replay_start": "2026-11-20T13:00:00+00:00"}, "not both"),
    ({"mode": "reset"}, "mode reset needs reset_to"),
    ({"mode": "reset", "reset_to": '{"t": {"0": 5'}, "reset_to is malformed JSON"),
    ({"mode": "reset", "reset_to": '{"t": {"zero": 5}}'}, "has partition 'zero', not a number"),
    ({"mode": "reset", "reset_to": '{"t": {"0": -1}}'}, "is not an offset"),
    ({"mode": "reset", "reset_to": '{"t": 5}'}, "must map partitions to offsets"),
    ({"mode": "reset", "reset_to": "soon"}, "'soon' is not an ISO-8601 timestamp"),
])
def test_bad_values_are_named(params, message):
    with pytest.raises(RunRequestError) as err:
        from_params("orders", params)
    assert message in str(err.value) and "pipeline orders" in str(err.value) and "Nothing was changed" in str(err.value)


@pytest.mark.parametrize("schedule, logical, start, end", [
    ("0 * * * *", "2026-10-05T10:00:00+00:00", "2026-10-05T10:00:00+00:00", "2026-10-05T11:00:00+00:00"),
    ("0 * * * *", "2026-10-05T10:59:59+00:00", "2026-10-05T10:00:00+00:00", "2026-10-05T11:00:00+00:00"),
    ("0 * * * *", "2026-10-05T12:00:00+02:00", "2026-10-05T10:00:00+00:00", "2026-10-05T11:00:00+00:00"),
    ("0 0 * * *", "2026-10-05T10:30:00+00:00", "2026-10-05T00:00:00+00:00", "2026-10-06T00:00:00+00:00"),
    ("*/15 * * * *", "2026-10-05T10:30:00+00:00", "2026-10-05T10:30:00+00:00", "2026-10-05T10:45:00+00:00"),
])
def test_a_logical_date_reads_the_schedule_interval_that_starts_at_or_contains_it(schedule, logical, start, end):
    """Scheduled, backfill and manual runs at the same logical date read the same interval (the one
    a scheduled run at that date has), not the one Airflow infers for manual runs ([L-1h, L))."""
    assert run_interval(schedule, datetime.fromisoformat(logical)) == (datetime.fromisoformat(start),
                                                                       datetime.fromisoformat(end))
    assert run_interval(schedule, None) is None
