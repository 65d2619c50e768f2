"""What a DAG run was asked to do: the trigger form's ``params`` (and Airflow backfills) parsed into a
``RunRequest``, with every malformed value rejected before anything is changed.

    mode next      read from the frontier (scheduled runs, and the default)
    mode replay    re-execute recorded batches: a time window [replay_start, replay_end) or batch_ids
    mode reset     move the frontier: reset_to = earliest | latest | ISO timestamp | {"topic": {"0": 123}}
                   (the JSON object as a string or as an object); skipping more than
                   ``MAX_RESET_SKIP`` records needs allow_data_loss
    backfill       an Airflow backfill run: replay/backfill its own data interval (no input needed)

Misconfiguration must not lose data silently: a key that is not a param (``mdoe``) is refused, not
ignored (which would run a plain batch), and so is a param of another mode (``reset_to`` without
``mode: reset`` would run a plain batch and go green); ``reason`` is bounded (it is stored in the
audit log and logged). Batch ids, offsets and partitions must fit the ledger's and Kafka's integers,
and timestamps lie between 1970 (Kafka's are milliseconds since the epoch) and 9999.

Checks that need Kafka or the ledger (unknown topic, offset outside the log, unknown batch) live in
``offsetbatch.plan.reset`` and ``offsetbatch.plan.replay``; this module checks shape only.

**One interval per logical date**: a run with logical date L reads the schedule interval that
contains L (for an hourly schedule and L on the hour, ``[L, L+1h)``), whatever created the run:
the scheduler, a backfill, a manual trigger with a logical date, ``airflow dags test``. Airflow
itself gives manual runs the interval *ending* at L, and a backfill that reuses an earlier run
keeps that run's old interval; taking the interval from the logical date makes every kind of run
at L read the same hour, so a backfill replays exactly the batches of its hours. A run without a
logical date (a manual trigger without one) has no interval and reads to the log end.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from croniter import croniter

from offsetbatch.errors import RunRequestError
from offsetbatch.model import TopicPartition

Mode = Literal["next", "replay", "reset", "backfill"]
MODES = ("next", "replay", "reset")
# The trigger params, in form order (``dag_params`` builds one Param each); any other key is refused.
PARAM_NAMES = ("mode", "replay_start", "replay_end", "batch_ids", "allow_more_rejected", "reset_to", "dry_run",
               "allow_rewind", "allow_data_loss", "reason")
# ``reason`` is stored in the ledger's audit table and logged: enough for a sentence and a ticket link.
MAX_REASON_CHARS = 1000
# A reset that records more skipped (never read) offsets than this, summed over partitions, needs
# allow_data_loss (``reset.check_data_loss``). Small enough that skipping an hour of a real topic needs
# the flag, large enough that stepping over a few poison records does not. A reset to a timestamp
# after the newest record of every partition needs it for any skipped record at all: it is what a
# mistyped year does, and "latest" says it plainly if it is meant.
MAX_RESET_SKIP = 10_000
# The params only one mode reads, with the form's defaults (``dag_params``): a value other than the
# default under another mode is refused (``check_mode_params``), as that mode would ignore it.
MODE_PARAMS: dict[str, dict[str, Any]] = {
    "replay": {"replay_start": None, "replay_end": None, "batch_ids": None, "allow_more_rejected": False},
    "reset": {"reset_to": None, "dry_run": True, "allow_rewind": False, "allow_data_loss": False},
}
# Batch ids and offsets are BIGINT in the ledger (and int64 in Kafka); partitions are int32 in Kafka.
MAX_ID = MAX_OFFSET = 2**63 - 1
MAX_PARTITION = 2**31 - 1
# Kafka record timestamps are milliseconds since the epoch: nothing is older than 1970, and a year
# past 9998 is a typo (and near datetime's limit, where time arithmetic overflows).
MIN_TIME = datetime(1970, 1, 1, tzinfo=timezone.utc)
MAX_TIME = datetime(9999, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class ResetTarget:
    """Where a reset moves the frontier."""

    kind: Literal["earliest", "latest", "timestamp", "offsets"]
    timestamp: datetime | None = None
    offsets: dict[TopicPartition, int] = field(default_factory=dict)

    def describe(self) -> str:
        if self.kind == "timestamp":
            return f"timestamp {self.timestamp.isoformat()}"
        if self.kind == "offsets":
            return "offsets " + ", ".join(f"{tp}@{o}" for tp, o in sorted(self.offsets.items()))
        return self.kind


@dataclass(frozen=True)
class RunRequest:
    mode: Mode = "next"
    window: tuple[datetime, datetime] | None = None
    batch_ids: tuple[int, ...] = ()
    reset_to: ResetTarget | None = None
    dry_run: bool = True
    allow_rewind: bool = False
    allow_data_loss: bool = False
    allow_more_rejected: bool = False  # replay: may reject records its target published (``commit.replay_guard``)
    reason: str | None = None
    actor: str | None = None


def run_interval(schedule: str | None, logical_date: datetime | None) -> tuple[datetime, datetime] | None:
    """The interval of the cron ``schedule`` (UTC) that contains ``logical_date``: ``[tick, next
    tick)`` with the latest tick at or before it. ``None`` for a run without a logical date (a
    lag-triggered run: it reads to the log end), or a pipeline without a schedule."""
    if logical_date is None or schedule is None:
        return None
    at = logical_date.astimezone(timezone.utc)
    # croniter's get_prev is strictly before its start: start a second after, so a tick at L is L.
    start = croniter(schedule, at + timedelta(seconds=1)).get_prev(datetime)
    end = croniter(schedule, start).get_next(datetime)
    return start.astimezone(timezone.utc).replace(fold=0), end.astimezone(timezone.utc).replace(fold=0)


def _shown(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters: a message must not carry a pasted megabyte."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def parse_time(name: str, param: str, value: Any) -> datetime:
    """An ISO-8601 timestamp with a timezone (a naive one is ambiguous across Airflow and Kafka),
    from 1970 (``MIN_TIME``: Kafka timestamps are milliseconds since the epoch) to before 9999."""
    if isinstance(value, datetime):
        ts = value
    else:
        try:
            ts = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
        except ValueError:
            raise RunRequestError(f"pipeline {name}: {param} {_shown(value)} is not an ISO-8601 timestamp "
                               f"(example: 2026-11-20T13:00:00+00:00). Nothing was changed.") from None
    if ts.tzinfo is None or ts.utcoffset() is None:
        raise RunRequestError(f"pipeline {name}: {param} {_shown(value)} has no timezone; add one "
                           f"(example: 2026-11-20T13:00:00+00:00). Nothing was changed.")
    if ts < MIN_TIME:
        raise RunRequestError(f"pipeline {name}: {param} {_shown(value)} is before 1970-01-01T00:00:00+00:00; "
                              f"Kafka record timestamps count milliseconds from then, so no record is older. Check "
                              f"the year (example: 2026-11-20T13:00:00+00:00). Nothing was changed.")
    if ts >= MAX_TIME:
        raise RunRequestError(f"pipeline {name}: {param} {_shown(value)} is after 9999-01-01T00:00:00+00:00, "
                              f"not a time any record has. Check the year (example: 2026-11-20T13:00:00+00:00). "
                              f"Nothing was changed.")
    return ts


def parse_reset_target(name: str, value: Any) -> ResetTarget:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise RunRequestError(f"pipeline {name}: mode reset needs reset_to: earliest, latest, an ISO timestamp, "
                           f"or JSON {{\"topic\": {{\"partition\": offset}}}}. Nothing was changed.")
    if isinstance(value, str) and value.strip() in ("earliest", "latest"):
        return ResetTarget(value.strip())
    if isinstance(value, dict) or (isinstance(value, str) and value.strip().startswith("{")):
        return ResetTarget("offsets", offsets=_parse_offsets(name, value))
    return ResetTarget("timestamp", timestamp=parse_time(name, "reset_to", value))


def _parse_offsets(name: str, value: Any) -> dict[TopicPartition, int]:
    shape = 'JSON {"topic": {"partition": offset}}, e.g. {"events": {"0": 1200, "1": 1180}}'
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise RunRequestError(f"pipeline {name}: reset_to is malformed JSON ({exc.msg} at character {exc.pos}); "
                               f"expected {shape}. Nothing was changed.") from None
    if not isinstance(value, dict) or not value:
        raise RunRequestError(f"pipeline {name}: reset_to must be {shape}. Nothing was changed.")
    out: dict[TopicPartition, int] = {}
    for topic, parts in value.items():
        if not isinstance(parts, dict) or not parts:
            raise RunRequestError(f"pipeline {name}: reset_to[{topic!r}] must map partitions to offsets ({shape}). "
                               f"Nothing was changed.")
        for part, offset in parts.items():
            try:
                p = int(part)
            except (TypeError, ValueError):
                raise RunRequestError(f"pipeline {name}: reset_to[{_shown(topic)}] has partition {_shown(part)}, "
                                   f"not a number. Nothing was changed.") from None
            if not 0 <= p <= MAX_PARTITION:
                raise RunRequestError(f"pipeline {name}: reset_to[{_shown(topic)}] has partition {_shown(part)}, "
                                      f"not a Kafka partition number (0 to {MAX_PARTITION}). Nothing was changed.")
            if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_OFFSET:
                raise RunRequestError(f"pipeline {name}: reset_to[{_shown(topic)}][{_shown(part)}] = "
                                      f"{_shown(offset)} is not an offset (an integer from 0 to {MAX_OFFSET}). "
                                      f"Nothing was changed.")
            out[TopicPartition(topic, p)] = offset
    return out


def check_batch_id(name: str, n: int) -> int:
    """A batch id the ledger can hold (1 to ``MAX_ID``, its BIGINT), checked before the ledger is
    asked: a larger one would fail there with the driver's ``OverflowError``. Public for the CLI."""
    if n <= 0:
        raise RunRequestError(f"pipeline {name}: batch id {n} is not valid (ids start at 1). Nothing was changed.")
    if n > MAX_ID:
        raise RunRequestError(f"pipeline {name}: batch id {_shown(n)} is out of range: batch ids are 1 to "
                              f"{MAX_ID} ('offsetbatch batches {name}' lists them). Nothing was changed.")
    return n


def _batch_ids(name: str, value: Any) -> tuple[int, ...]:
    if value in (None, "", []):
        return ()
    items = value if isinstance(value, list) else str(value).replace(",", " ").split()
    ids = []
    for item in items:
        try:
            if isinstance(item, bool) or not isinstance(item, (int, str)):
                raise TypeError(item)
            n = int(item)
        except (TypeError, ValueError):
            raise RunRequestError(f"pipeline {name}: batch_ids has {_shown(item)}, not a batch id. "
                                  f"Nothing was changed.") from None
        ids.append(check_batch_id(name, n))
    return tuple(sorted(set(ids)))


def check_keys(name: str, conf: dict | None) -> None:
    """Refuse keys that are not trigger params. Airflow merges a run's conf into its params and keeps
    unknown keys, so a misspelled ``mdoe: reset`` would otherwise run a plain batch: fail instead,
    naming the key (and the param it probably meant) and the known ones."""
    # Cut to 40 characters: a message (and difflib) must not carry whatever a caller pasted as a key.
    unknown = sorted(str(k)[:40] for k in (conf or {}) if k not in PARAM_NAMES)
    if not unknown:
        return
    hints = [f"{k!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(k, PARAM_NAMES, 1)) else repr(k)
             for k in unknown]
    raise RunRequestError(f"pipeline {name}: unknown trigger parameter(s) {', '.join(hints)}; the known ones are "
                          f"{', '.join(PARAM_NAMES)}. Fix the spelling and trigger again. Nothing was changed.")


def _given(value: Any, default: Any) -> bool:
    """Whether a param holds something other than the form's default (an emptied field is unset;
    a string "false" is not the default False)."""
    if value is None or value in ({}, []) or (isinstance(value, str) and not value.strip()):
        return False
    return not (type(value) is type(default) and value == default)


def check_mode_params(name: str, mode: str, params: dict, mode_given: bool = True) -> None:
    """Refuse params that only another mode reads (``MODE_PARAMS``): a trigger with ``reset_to`` but
    no ``mode`` would run a plain batch (mode ``next``) and go green without moving anything."""
    foreign = {other: [k for k, default in names.items() if _given(params.get(k), default)]
               for other, names in MODE_PARAMS.items() if other != mode}
    foreign = {other: keys for other, keys in foreign.items() if keys}
    if not foreign:
        return
    what = {"reset": "move the frontier", "replay": "re-execute recorded batches"}
    parts = [f"{', '.join(f'{k}={_shown(params[k], 40)}' for k in keys)} "
             f"{'applies' if len(keys) == 1 else 'apply'} to mode {other} only" for other, keys in foreign.items()]
    current = f"mode is {mode!r}" if mode_given else f"no mode was given, so the mode is {mode!r}"
    keys = [k for ks in foreign.values() for k in ks]
    if len(foreign) == 1:
        [other] = foreign
        todo = f"to {what[other]}, set mode: {other}; otherwise leave {', '.join(keys)} out"
    else:
        todo = (f"a run does one thing: set mode: reset or mode: replay and leave the other mode's parameters out "
                f"(or leave all of {', '.join(keys)} out)")
    raise RunRequestError(f"pipeline {name}: {' and '.join(parts)}, but {current}: {todo}. Nothing was changed.")


def check_reason(name: str, value: Any) -> str | None:
    """The audit reason, bounded: it is stored whole in the ledger's audit table and logged. Public
    because requests built without ``from_params`` (the CLI's reset) are checked by ``run_reset``."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise RunRequestError(f"pipeline {name}: reason must be text, not {type(value).__name__}. "
                              f"Nothing was changed.")
    if len(value) > MAX_REASON_CHARS:
        raise RunRequestError(f"pipeline {name}: reason is {len(value):,} characters long, more than the "
                              f"{MAX_REASON_CHARS:,} allowed (it is kept in the ledger's audit log); shorten it, "
                              f"e.g. to a sentence and a ticket link. Nothing was changed.")
    return value


def _flag(name: str, params: dict, param: str, default: bool) -> bool:
    """A boolean param: a string "false" must not count as true."""
    value = params.get(param, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RunRequestError(f"pipeline {name}: {param} must be true or false, not {value!r}. Nothing was changed.")
    return value


def from_params(name: str, params: dict | None, run_type: str | None = None,
                interval: tuple[datetime | None, datetime | None] = (None, None), actor: str | None = None) -> RunRequest:
    """The request of one DAG run. An Airflow backfill run always backfills its data interval.

    ``params`` are the run's params (the DAG's, merged with the run's conf by Airflow): keys that
    are not params are refused (``check_keys``) before anything else is read."""
    params = params or {}
    check_keys(name, params)
    if run_type == "backfill":
        if interval[0] is None or interval[1] is None:
            raise RunRequestError(f"pipeline {name}: a backfill run without a data interval cannot be planned")
        return RunRequest("backfill", window=(interval[0], interval[1]), actor=actor, reason="airflow backfill")
    mode = params.get("mode") or "next"
    if mode not in MODES:
        raise RunRequestError(f"pipeline {name}: mode {_shown(mode)} is not one of {', '.join(MODES)}. "
                              f"Nothing was changed.")
    check_mode_params(name, mode, params, mode_given=bool(params.get("mode")))
    common = dict(actor=actor, reason=check_reason(name, params.get("reason")))
    if mode == "next":
        return RunRequest("next", **common)
    if mode == "replay":
        common["allow_more_rejected"] = _flag(name, params, "allow_more_rejected", False)
        start, end, ids = params.get("replay_start"), params.get("replay_end"), _batch_ids(name, params.get("batch_ids"))
        if ids and (start or end):
            raise RunRequestError(f"pipeline {name}: give replay either batch_ids or a window "
                               f"(replay_start/replay_end), not both. Nothing was changed.")
        if ids:
            return RunRequest("replay", batch_ids=ids, **common)
        if not (start and end):
            raise RunRequestError(f"pipeline {name}: mode replay needs batch_ids, or both replay_start and "
                               f"replay_end. Nothing was changed.")
        s, e = parse_time(name, "replay_start", start), parse_time(name, "replay_end", end)
        if e <= s:
            raise RunRequestError(f"pipeline {name}: replay window end {e.isoformat()} is not after its start "
                               f"{s.isoformat()}. Nothing was changed.")
        return RunRequest("replay", window=(s, e), **common)
    return RunRequest("reset", reset_to=parse_reset_target(name, params.get("reset_to")),
                      dry_run=_flag(name, params, "dry_run", True),
                      allow_rewind=_flag(name, params, "allow_rewind", False),
                      allow_data_loss=_flag(name, params, "allow_data_loss", False), **common)


def dag_params() -> dict:
    """The DAG's ``params`` (``PARAM_NAMES``, in that order): Airflow 3.3 renders them as the Trigger
    DAG form, with these descriptions, and validates a run's conf against their types."""
    from airflow.sdk import Param

    return {
        "mode": Param("next", type="string", enum=list(MODES), title="Mode",
                      description="next: read from the frontier (what scheduled runs do). replay: re-execute "
                                  "recorded batches (same offsets, today's code) and replace their output. reset: "
                                  "move the frontier (audited)."),
        "replay_start": Param(None, type=["null", "string"], title="Replay: window start",
                              description="replay only: ISO timestamp with timezone, inclusive "
                                          "(e.g. 2026-11-20T13:00:00+00:00). Batches holding records of "
                                          "[start, end) are re-executed."),
        "replay_end": Param(None, type=["null", "string"], title="Replay: window end",
                            description="replay only: ISO timestamp with timezone, exclusive; must be after the start."),
        "batch_ids": Param(None, type=["null", "string"], title="Replay: batch ids",
                           description="replay only, instead of a window: comma-separated ids, e.g. 3,4,7."),
        "allow_more_rejected": Param(False, type="boolean", title="Replay: allow rejecting published records",
                                     description="replay only: a replay that rejects more records than the output "
                                                 "it replaces would replace published rows with rejections; it is "
                                                 "refused at commit unless this is ticked (a stricter schema or "
                                                 "transform on purpose)."),
        # An object too: `--conf '{"reset_to": {"events": {"0": 1200}}}'` is the README's form.
        "reset_to": Param(None, type=["null", "string", "object"], title="Reset: target",
                          description='reset only: earliest | latest | ISO timestamp with timezone | JSON '
                                      '{"topic": {"partition": offset}} (listed partitions only).'),
        "dry_run": Param(True, type="boolean", title="Reset: dry run",
                         description="reset only: show what would move and change nothing (default). "
                                     "Untick to apply."),
        "allow_rewind": Param(False, type="boolean", title="Reset: allow rewinding over committed batches",
                              description="reset only: moving the frontier back over committed batches marks them "
                                          "superseded; their output is replaced when the next runs read the "
                                          "offsets again (never duplicated)."),
        "allow_data_loss": Param(False, type="boolean", title="Reset: allow skipping unread records",
                                 description="reset only: a reset that skips more than "
                                             f"{MAX_RESET_SKIP:,} unread records, or any reset to a timestamp "
                                             "after the newest record, is refused unless this is ticked. Skipped "
                                             "offsets are recorded as gap rows and never read."),
        # No maxLength here: Airflow's refusal would quote the whole value; from_params names the limit.
        "reason": Param(None, type=["null", "string"], title="Reason",
                        description=f"Free text (at most {MAX_REASON_CHARS:,} characters) kept in the ledger's "
                                    "audit log with who triggered the run."),
    }
