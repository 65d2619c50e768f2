"""``maintain(pipeline)``: one maintenance pass, from the CLI (``offsetbatch maintain``) or the
pipeline's maintenance DAG; what a pass is made of is ``sinks.maintenance`` (``Action``, ``Horizon``,
the ``maintenance:`` settings).

A pass first publishes every batch the ledger committed and a crash left unpublished (the same
roll-forward every plan and commit does), so no action ever meets output that is half there. Then
it applies, in order, the sink's actions (``sinks.base.Maintained``), the ledger's
(``ledger_actions``) and the deletion of the job specs of batches the ledger summarized. Each
action but the ledger's runs holding the pipeline's ledger lock, the lock every plan and commit
takes: a run's plan or commit waits for the action in progress, and runs go on between actions.
The ledger's history takes the lock per chunk itself. The pass is audited in the ledger's
events (``maintenance``) like a reset: who, what was planned, what each action changed. A dry run
plans and prints, and changes nothing: no roll-forward, no event.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from offsetbatch import redact
from offsetbatch.ledger import Ledger, summaries
from offsetbatch.maintenance import ledger_actions
from offsetbatch.pipeline import Pipeline
from offsetbatch.sinks import Maintained
from offsetbatch.sinks.maintenance import Action, Horizon, MaintenanceSettings

log = logging.getLogger(__name__)
EVENT = "maintenance"


def horizon(policy: MaintenanceSettings, now: datetime | None = None) -> Horizon:
    """The times this pass keeps things after, one ``now`` for every action."""
    now = now or datetime.now(timezone.utc)
    return Horizon(now=now, retain_before=now - timedelta(seconds=policy.retain),
                   grace_before=now - timedelta(seconds=policy.in_flight_grace),
                   ledger_before=now - timedelta(seconds=policy.ledger_retain))


@dataclass
class Outcome:
    """One action of a pass: what it planned and, unless a dry run, what it changed."""

    action: Action
    done: dict[str, int] | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"step": self.action.step, "target": self.action.target, "summary": self.action.summary,
                "planned": self.action.counts, "done": self.done, "seconds": round(self.seconds, 3)}


@dataclass
class Pass:
    pipeline: str
    dry_run: bool
    horizon: Horizon
    rolled_forward: list[int] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0
    pass_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])  # pairs its audit events

    def to_dict(self) -> dict:
        return {"pipeline": self.pipeline, "pass_id": self.pass_id, "dry_run": self.dry_run,
                "now": self.horizon.now.isoformat(), "retain_before": self.horizon.retain_before.isoformat(),
                "grace_before": self.horizon.grace_before.isoformat(),
                "ledger_before": self.horizon.ledger_before.isoformat(),
                "rolled_forward": self.rolled_forward, "actions": [o.to_dict() for o in self.outcomes],
                "seconds": round(self.seconds, 3)}


def plan(pipeline: Pipeline, ledger: Ledger, when: Horizon) -> list[tuple[Action, bool]]:
    """The pass's actions, each with whether it is applied under the pipeline's lock; nothing changes."""
    sink = pipeline.sink
    policy = pipeline.cfg.maintenance
    planned = [(a, True) for a in sink.maintenance(policy, when)] if isinstance(sink, Maintained) else []
    history = ledger_actions.actions(ledger, pipeline.name, when)
    planned += [(a, False) for a in history]
    specs = _job_specs_action(pipeline, ledger, summarizing=bool(history))
    return planned + ([(specs, True)] if specs else [])


def _job_specs_action(pipeline: Pipeline, ledger: Ledger, summarizing: bool) -> Action | None:
    """The job specs (``_offsetbatch/plans/``, every sink) of batches the ledger has summarized: a
    replay reads its target's spec (the schemas it was decoded with), and a summarized batch can no
    longer be replayed. Run after the ledger's actions, so a pass drops what it summarized; planned
    only when there is something to drop now, or the ledger's actions will summarize (``summarizing``:
    how many is known once they ran)."""
    from offsetbatch import storage

    layout = pipeline.sink.staging
    folder = f"{layout.meta}/plans"

    def summarized() -> list[str]:
        with ledger.reading() as conn:
            done = summaries.history_totals(conn, pipeline.name)
        if done is None:
            return []
        names = {f"batch_id={i}.json": i for i in range(done.first_batch_id, done.last_batch_id + 1)}
        found = [n for n in storage.children(folder) if n in names]
        kept = ledger.existing_ids(pipeline.name, [names[n] for n in found])
        return [f"{folder}/{n}" for n in found if names[n] not in kept]

    def apply() -> dict[str, int]:
        gone = summarized()
        for uri in gone:
            storage.remove(uri)
        return {"job_specs": len(gone)}
    if not storage.exists(folder):
        return None
    found = summarized()
    if not (found or summarizing):
        return None
    return Action("staging.drop-job-specs", folder, f"delete the job specs of batches the ledger has summarized "
                  f"({len(found)} now{', more once the ledger history is summarized' if summarizing else ''}; no "
                  f"replay reads them any more)", {"job_specs": len(found)}, apply)


def maintain(pipeline: Pipeline, ledger: Ledger, *, dry_run: bool = False, actor: str | None = None,
             now: datetime | None = None) -> Pass:
    """One pass; see the module docstring. Raises what an action raises, after auditing it."""
    from offsetbatch.commit.publication import publish_pending

    name = pipeline.name
    when = horizon(pipeline.cfg.maintenance, now)
    result = Pass(name, dry_run, when)
    t0 = time.monotonic()
    if not dry_run:
        result.rolled_forward = publish_pending(pipeline, ledger)
    planned = plan(pipeline, ledger, when)
    result.outcomes = [Outcome(a) for a, _ in planned]
    if dry_run:
        for o in result.outcomes:
            log.info("pipeline %s maintenance (dry run): would %s", name, o.action.describe())
        result.seconds = time.monotonic() - t0
        return result
    _audit(ledger, name, actor, {"status": "started", "pass_id": result.pass_id,
                                 "actions": [o.to_dict() for o in result.outcomes]})
    try:
        for outcome, (action, serialized) in zip(result.outcomes, planned):
            started = time.monotonic()
            if serialized:
                with ledger.lock(name):
                    outcome.done = action.apply()
            else:
                outcome.done = action.apply()
            outcome.seconds = time.monotonic() - started
            log.info("pipeline %s maintenance: %s done in %.1fs: %s", name, action.describe(), outcome.seconds,
                     _figures(outcome.done))
    except BaseException as exc:  # also a task Airflow terminates or times out: audited, then raised
        result.seconds = time.monotonic() - t0
        _audit(ledger, name, actor, {**result.to_dict(), "status": "failed",
                                     "error": redact.url(f"{type(exc).__name__}: {exc}")[:2000]})
        raise
    result.seconds = time.monotonic() - t0
    _audit(ledger, name, actor, {**result.to_dict(), "status": "done"})
    return result


def _figures(counts: dict[str, int] | None) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in (counts or {}).items()) or "nothing to do"


def _audit(ledger: Ledger, name: str, actor: str | None, detail: dict) -> None:
    with ledger.lock(name) as conn:
        ledger.event(conn, name, EVENT, detail, actor=actor)
