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


def test_allow_more_rejected_is_a_replay_flag_off_unless_given():
    assert not from_params("p", {"mode": "replay", "batch_ids": "1"}).allow_more_rejected
    assert from_params("p", {"mode": "replay", "batch_ids": "1", "allow_more_rejected": True}).allow_more_rejected
    with pytest.raises(RunRequestError, match="allow_more_rejected=True applies to mode replay only"):
        from_params("p", {"mode": "next", "allow_more_rejected": True})


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
        assert "the known ones are mode, replay_start, replay_end, batch_ids, allow_more_rejected, reset_to, dry_run, " \
               "allow_rewind, allow_data_loss, reason" in message and message.endswith("Nothing was changed.")
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


# ---- params of another mode, and values outside what the ledger and Kafka can hold -------------------

# What the Trigger DAG form sends when nothing is changed: every param at its default.
FORM = {"mode": "next", "replay_start": None, "replay_end": None, "batch_ids": None, "reset_to": None,
        "dry_run": True, "allow_rewind": False, "allow_data_loss": False, "reason": None}


@pytest.mark.parametrize("params, message", [
    # no mode: mode next would run a plain batch and go green, moving nothing
    ({"reset_to": "2026-11-20T13:00:00+00:00"},
     "reset_to='2026-11-20T13:00:00+00:00' applies to mode reset only, but no mode was given, so the mode is "
     "'next': to move the frontier, set mode: reset; otherwise leave reset_to out."),
    ({"reset_to": "latest", "dry_run": False},
     "reset_to='latest', dry_run=False apply to mode reset only, but no mode was given, so the mode is 'next'"),
    ({"dry_run": False}, "dry_run=False applies to mode reset only"),
    ({**FORM, "allow_rewind": True}, "allow_rewind=True applies to mode reset only, but mode is 'next'"),
    ({"allow_data_loss": True}, "allow_data_loss=True applies to mode reset only"),
    ({"reset_to": {"t": {"0": 5}}}, "reset_to={'t': {'0': 5}} applies to mode reset only"),
    ({"dry_run": "false"}, "dry_run='false' applies to mode reset only"),
    ({"mode": "replay", "batch_ids": "3", "reset_to": "latest"},
     "reset_to='latest' applies to mode reset only, but mode is 'replay'"),
    ({"mode": "replay", "batch_ids": "3", "dry_run": False}, "dry_run=False applies to mode reset only"),
    # replay-only params under mode next or reset
    ({"batch_ids": "3"}, "batch_ids='3' applies to mode replay only, but no mode was given, so the mode is 'next': "
                         "to re-execute recorded batches, set mode: replay; otherwise leave batch_ids out."),
    ({**FORM, "replay_start": "2026-11-20T13:00:00+00:00", "replay_end": "2026-11-20T15:00:00+00:00"},
     "replay_start='2026-11-20T13:00:00+00:00', replay_end='2026-11-20T15:00:00+00:00' apply to mode replay only"),
    ({"mode": "reset", "reset_to": "latest", "batch_ids": "3"},
     "batch_ids='3' applies to mode replay only, but mode is 'reset'"),
    ({"batch_ids": "3", "reset_to": "latest"},
     "batch_ids='3' applies to mode replay only and reset_to='latest' applies to mode reset only, but no mode was "
     "given, so the mode is 'next': a run does one thing: set mode: reset or mode: replay"),
])
def test_params_of_another_mode_are_refused(params, message):
    """{"reset_to": "..."} without a mode used to run a plain batch (mode next) and go green."""
    with pytest.raises(RunRequestError) as err:
        from_params("orders", params)
    text = str(err.value)
    assert text.startswith("pipeline orders: ") and message in text and text.endswith("Nothing was changed."), text


@pytest.mark.parametrize("params", [
    FORM, {**FORM, "mode": None}, {**FORM, "mode": ""},
    {**FORM, "mode": "replay", "batch_ids": "3"},
    {**FORM, "mode": "replay", "replay_start": "2026-11-20T13:00:00+00:00", "replay_end": "2026-11-20T15:00:00+00:00"},
    {**FORM, "mode": "reset", "reset_to": "latest", "dry_run": False, "allow_rewind": True, "allow_data_loss": True},
    {**FORM, "reset_to": "", "batch_ids": "", "replay_start": "  "},  # emptied form fields are unset
])
def test_the_form_with_its_defaults_passes_in_every_mode(params):
    assert from_params("orders", params).mode == (params["mode"] or "next")


def test_backfills_keep_ignoring_the_form():
    """A backfill run backfills its interval, whatever its params hold (they are the DAG's defaults, or
    the conf of a run it reuses)."""
    for params in ({**FORM, "reset_to": "latest", "dry_run": False}, {**FORM, "batch_ids": "3"}):
        req = from_params("orders", params, run_type="backfill", interval=(T0, T0.replace(hour=14)))
        assert (req.mode, req.window) == ("backfill", (T0, T0.replace(hour=14)))


BIG = "12345678901234567890123"  # 23 digits: beyond the ledger's BIGINT (the driver raised OverflowError)


@pytest.mark.parametrize("params, message", [
    ({"mode": "replay", "batch_ids": BIG},
     f"batch id {BIG} is out of range: batch ids are 1 to 9223372036854775807 ('offsetbatch batches orders' lists "
     f"them)."),
    ({"mode": "replay", "batch_ids": f"3, {2**63}"}, f"batch id {2**63} is out of range"),
    ({"mode": "replay", "batch_ids": [3, int(BIG)]}, f"batch id {BIG} is out of range"),
    ({"mode": "replay", "batch_ids": "0"}, "batch id 0 is not valid (ids start at 1)"),
    ({"mode": "replay", "batch_ids": [True]}, "batch_ids has True, not a batch id"),
    ({"mode": "replay", "batch_ids": [1.5]}, "batch_ids has 1.5, not a batch id"),
    ({"mode": "replay", "batch_ids": "9" * 5000}, "batch_ids has '99999"),  # int() refuses > 4300 digits
    ({"mode": "replay", "replay_start": "0001-01-01T00:00:00+00:00", "replay_end": "2026-11-20T15:00:00+00:00"},
     "replay_start '0001-01-01T00:00:00+00:00' is before 1970-01-01T00:00:00+00:00; Kafka record timestamps count "
     "milliseconds from then, so no record is older. Check the year"),
    ({"mode": "replay", "replay_start": "1969-12-31T23:59:59+00:00", "replay_end": "2026-11-20T15:00:00+00:00"},
     "replay_start '1969-12-31T23:59:59+00:00' is before 1970-01-01"),
    ({"mode": "replay", "replay_start": "2026-11-20T13:00:00+00:00", "replay_end": "9999-06-01T00:00:00+00:00"},
     "replay_end '9999-06-01T00:00:00+00:00' is after 9999-01-01T00:00:00+00:00, not a time any record has. "
     "Check the year"),
    ({"mode": "replay", "replay_start": "2026-11-20T13:00:00+00:00", "replay_end": "2026-11-20T15:00:00"},
     "replay_end '2026-11-20T15:00:00' has no timezone"),
    ({"mode": "reset", "reset_to": "0001-01-01T00:00:00+00:00"},
     "reset_to '0001-01-01T00:00:00+00:00' is before 1970-01-01T00:00:00+00:00"),
    ({"mode": "reset", "reset_to": "0001-01-01T00:00:00+01:00"}, "is before 1970-01-01"),
    ({"mode": "reset", "reset_to": "9999-12-31T23:59:59-05:00"}, "is after 9999-01-01"),
    ({"mode": "reset", "reset_to": "0001-01-01T00:00:00"}, "reset_to '0001-01-01T00:00:00' has no timezone"),
    ({"mode": "reset", "reset_to": f'{{"t": {{"0": {BIG}}}}}'},
     f"reset_to['t']['0'] = {BIG} is not an offset (an integer from 0 to 9223372036854775807)"),
    ({"mode": "reset", "reset_to": '{"t": {"-1": 5}}'},
     "reset_to['t'] has partition '-1', not a Kafka partition number (0 to 2147483647)"),
    ({"mode": "reset", "reset_to": {"t": {str(2**31): 5}}}, f"has partition '{2**31}', not a Kafka partition number"),
    ({"mode": "reset", "reset_to": "x" * 10_000}, "reset_to 'xxxxx"),
])
def test_values_out_of_range_are_named(params, message):
    with pytest.raises(RunRequestError) as err:
        from_params("orders", params)
    text = str(err.value)
    assert text.startswith("pipeline orders: ") and message in text and text.endswith("Nothing was changed."), text
    assert len(text) < 400  # a pasted megabyte is not quoted back


def test_the_range_limits_themselves_are_accepted():
    req = from_params("p", {"mode": "replay", "batch_ids": f"1,{2**63 - 1}"})
    assert req.batch_ids == (1, 2**63 - 1)
    req = from_params("p", {"mode": "replay", "replay_start": "1970-01-01T00:00:00Z",
                            "replay_end": "9998-12-31T23:59:59+00:00"})
    assert req.window[0] == datetime(1970, 1, 1, tzinfo=timezone.utc)
    req = from_params("p", {"mode": "reset", "reset_to": {"t": {str(2**31 - 1): 2**63 - 1}}})
    assert req.reset_to.offsets == {TopicPartition("t", 2**31 - 1): 2**63 - 1}


@pytest.mark.parametrize("params", [
    {"reset_to": "earliest", "dry_run": False},  # no mode: would have run a plain batch
    {"mode": "replay", "batch_ids": BIG},
    {"mode": "reset", "reset_to": "0001-01-01T00:00:00+00:00", "dry_run": False, "allow_rewind": True},
])
def test_a_refused_trigger_changes_nothing_in_the_ledger(tmp_path, params):
    """The plan task refuses these before it opens Kafka or the ledger: a real SQLite ledger with a
    committed batch is byte-for-byte what it was (and its rows the same)."""
    import sqlite3
    from types import SimpleNamespace

    from offsetbatch.dag.tasks import plan_step
    from offsetbatch.ledger import Ledger
    from offsetbatch.model import OffsetRange

    db = tmp_path / "ledger.db"
    with Ledger(f"sqlite:///{db}", create=True) as led:
        with led.lock("orders") as conn:
            led.start_partitions(conn, "orders", {TopicPartition("t", 0): 0}, "earliest")
        with led.lock("orders") as conn:
            b = led.insert_batch(conn, "orders", "incremental", [OffsetRange("t", 0, 0, 100, 0)], dag_id="d",
                                 run_id="scheduled__x", interval=(None, None), output_path=str(tmp_path))
            led.commit_batch(conn, b, {}, {})

    def rows():
        with sqlite3.connect(db) as conn:
            return list(conn.iterdump())

    before, raw = rows(), db.read_bytes()
    opened = []
    pipeline = SimpleNamespace(cfg=SimpleNamespace(name="orders", airflow=SimpleNamespace(schedule="0 * * * *")),
                               kafka=lambda: opened.append("kafka"), ledger=lambda create=False: opened.append("ledger"))
    with pytest.raises(RunRequestError, match="pipeline orders: .*Nothing was changed"):
        plan_step(pipeline, "offsetbatch_orders", "manual__1", None, params, "manual", "tester")
    assert opened == [] and rows() == before and db.read_bytes() == raw
