"""Trigger parameters: shape checks that fail before the ledger is opened, naming the bad value."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from offsetbatch.errors import RunRequestError
from offsetbatch.model import TopicPartition
from offsetbatch.plan.request import MAX_REASON_CHARS, PARAM_NAMES, check_keys, dag_params, from_params, run_interval

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
    ({"mode": "reset", "reset_to": "latest", "allow_data_loss": "yes"}, "allow_data_loss must be true or false"),
    ({"mode": "reset", "reset_to": "latest", "allow_rewind": "false"}, "allow_rewind must be true or false"),
])
def test_bad_values_are_named(params, message):
    with pytest.raises(RunRequestError) as err:
        from_params("orders", params)
    assert message in str(err.value) and "pipeline orders" in str(err.value) and "Nothing was changed" in str(err.value)


def test_reset_to_as_a_json_object_as_the_readme_shows():
    """`--conf '{"mode": "reset", "reset_to": {"t": {"0": 5}}}'`: an object, not a string holding JSON."""
    req = from_params("p", {"mode": "reset", "reset_to": {"t": {"0": 5, "1": 0}}, "dry_run": False})
    assert req.reset_to.kind == "offsets" and req.reset_to.offsets == {TopicPartition("t", 0): 5, TopicPartition("t", 1): 0}
    with pytest.raises(RunRequestError, match=r"reset_to\['t'\] has partition 'x', not a number"):
        from_params("p", {"mode": "reset", "reset_to": {"t": {"x": 5}}})


def test_the_form_accepts_reset_to_as_an_object_and_lists_every_param():
    """Airflow validates a run's conf against the Params' JSON schema before the run exists: an
    object-typed reset_to must pass it, and PARAM_NAMES (what check_keys accepts) is the form."""
    params = dag_params()
    assert tuple(params) == PARAM_NAMES
    params["reset_to"].resolve({"t": {"0": 5}})
    params["reset_to"].resolve("latest")
    assert params["allow_data_loss"].resolve() is False


def test_allow_data_loss_is_off_unless_given():
    assert not from_params("p", {"mode": "reset", "reset_to": "latest", "dry_run": False}).allow_data_loss
    assert from_params("p", {"mode": "reset", "reset_to": "latest", "allow_data_loss": True}).allow_data_loss


@pytest.mark.parametrize("conf, named", [
    ({"mdoe": "reset", "reset_to": "latest"}, "'mdoe' (did you mean 'mode'?)"),
    ({"mode": "reset", "reset_to": "latest", "dryrun": False}, "'dryrun' (did you mean 'dry_run'?)"),
    ({"mode": "next", "colour": "blue"}, "'colour'; the known ones"),
])
def test_unknown_keys_are_refused_naming_the_key_and_the_known_ones(conf, named):
    """A misspelled key used to be ignored: {"mdoe": "reset"} ran a normal batch."""
    for call in (lambda: from_params("orders", conf), lambda: check_keys("orders", conf),
                 lambda: from_params("orders", conf, run_type="backfill", interval=(T0, T0.replace(hour=14)))):
        with pytest.raises(RunRequestError) as err:
            call()
        message = str(err.value)
        assert message.startswith("pipeline orders: unknown trigger parameter(s) ") and named in message
        assert "the known ones are mode, replay_start, replay_end, batch_ids, reset_to, dry_run, allow_rewind, " \
               "allow_data_loss, reason" in message and message.endswith("Nothing was changed.")
    check_keys("orders", None)
    check_keys("orders", {name: None for name in PARAM_NAMES})


def test_reason_has_a_length_limit():
    """It is stored in the audit table and logged: a 1 MB reason is refused without quoting it."""
    assert from_params("p", {"reason": "x" * MAX_REASON_CHARS}).reason == "x" * MAX_REASON_CHARS
    for mode in ({"mode": "next"}, {"mode": "reset", "reset_to": "latest"}, {"mode": "replay", "batch_ids": "1"}):
        with pytest.raises(RunRequestError) as err:
            from_params("orders", {**mode, "reason": "y" * 1_000_000})
        assert str(err.value) == ("pipeline orders: reason is 1,000,000 characters long, more than the 1,000 allowed "
                                  "(it is kept in the ledger's audit log); shorten it, e.g. to a sentence and a "
                                  "ticket link. Nothing was changed.")


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


def test_refusals_fail_the_task_without_retries_and_other_errors_keep_them():
    """The plan task's mapping: an error that fails every attempt alike becomes Airflow's
    AirflowFailException (no retry) with the same message; a retry-fixable one passes through."""
    from airflow.sdk.exceptions import AirflowFailException

    from offsetbatch.dag.retry_policy import fail_without_retry, is_permanent
    from offsetbatch.errors import BackfillRefusedError, ConfigError, DataLossError, SinkError
    from offsetbatch.ledger.errors import LedgerLockTimeout, LedgerMissingError, LedgerUnreachableError, OwnershipError

    for exc in (RunRequestError("pipeline p: bad. Nothing was changed."), BackfillRefusedError("b"), DataLossError("d"),
                ConfigError("c"), OwnershipError("o"), LedgerMissingError("m")):
        with pytest.raises(AirflowFailException) as err, fail_without_retry():
            raise exc
        assert str(err.value) == str(exc) and err.value.__cause__ is exc and is_permanent(exc)
    for exc in (LedgerLockTimeout("busy"), LedgerUnreachableError("down"), SinkError("s"), OSError("disk")):
        with pytest.raises(type(exc)), fail_without_retry():
            raise exc
        assert not is_permanent(exc)
