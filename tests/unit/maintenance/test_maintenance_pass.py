"""A maintenance pass as the CLI and the maintenance DAG run it (``offsetbatch.maintenance.run``),
over a real SQLite ledger, with a sink whose actions only record what was done to them (the
sinks' own actions are proven on real tables in tests/integration/sinks/): the retention settings
and their errors, a dry run that changes nothing, the order of actions, each sink action under the
pipeline's ledger lock, the audit event of a pass that ends and of one that fails, the
``maintain`` command, and the DAG a ``maintenance.schedule`` adds."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
import sqlalchemy as sa
import yaml
from pydantic import ValidationError

from offsetbatch.ledger import Ledger
from offsetbatch.ledger.schema import events
from offsetbatch.maintenance import run
from offsetbatch.ops import cli
from offsetbatch.pipeline import Pipeline
from offsetbatch.sinks import FilesSink
from offsetbatch.sinks.maintenance import Action, MaintenanceSettings

NOW = datetime(2026, 11, 27, 12, tzinfo=timezone.utc)


def _config(tmp_path, **maintenance) -> str:
    doc = {"name": "orders", "kafka": {"topics": ["orders"]}, "sink": {"path": str(tmp_path / "table")},
           "ledger": {"url": f"sqlite:///{tmp_path}/ledger.db"}, "maintenance": maintenance}
    (tmp_path / "pipelines").mkdir(exist_ok=True)
    path = tmp_path / "pipelines" / "orders.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


class Recorder:
    """Actions that record the order they ran in and whether the pipeline's lock was free then."""

    def __init__(self, ledger: Ledger, fail_at: str | None = None):
        self.ledger, self.fail_at, self.ran = ledger, fail_at, []

    def action(self, step: str) -> Action:
        def apply() -> dict[str, int]:
            if step == self.fail_at:
                raise OSError(f"disk full while {step} (catalog postgresql://svc:s3cret@db/cat)")
            self.ran.append((step, self._lock_is_held()))
            return {"files": 2}
        return Action(step, "table /t", f"{step} of 2 file(s)", {"files": 2}, apply)

    def _lock_is_held(self) -> bool:
        """A second writer on the SQLite ledger times out while the pass holds the lock."""
        probe = sa.create_engine(self.ledger.url, connect_args={"timeout": 0.05})
        try:
            with probe.connect() as conn:
                conn.exec_driver_sql("BEGIN IMMEDIATE")
                conn.exec_driver_sql("ROLLBACK")
            return False
        except sa.exc.OperationalError:
            return True
        finally:
            probe.dispose()


@pytest.fixture
def wired(tmp_path, monkeypatch):
    """The ``orders`` pipeline whose files sink's actions are a ``Recorder``'s and whose ledger has none."""
    pipeline = Pipeline.load(_config(tmp_path))
    ledger = pipeline.ledger(create=True)
    rec = Recorder(ledger)
    monkeypatch.setattr(FilesSink, "maintenance", lambda self, policy, horizon: [rec.action("compact"),
                                                                                    rec.action("retention")])
    monkeypatch.setattr("offsetbatch.maintenance.ledger_actions.actions", lambda *a, **k: [])
    yield pipeline, ledger, rec
    ledger.dispose()


def _events(ledger: Ledger) -> list[tuple[str, str | None, dict]]:
    with ledger.reading() as conn:
        return [(r.kind, r.actor, r.detail) for r in conn.execute(sa.select(events).order_by(events.c.id))]


def test_retention_settings_take_durations_and_name_what_is_wrong():
    policy = MaintenanceSettings(retain="3d", in_flight_grace="12h", ledger_retain="30d")
    assert (policy.retain, policy.in_flight_grace, policy.ledger_retain) == (3 * 86400, 12 * 3600, 30 * 86400)
    with pytest.raises(ValidationError, match="in_flight_grace .* is longer than retain"):
        MaintenanceSettings(retain="1h", in_flight_grace="1d")
    with pytest.raises(ValidationError, match="'7 days' is not a duration"):
        MaintenanceSettings(retain="7 days")
    with pytest.raises(ValidationError, match="retian"):
        MaintenanceSettings(retian="7d")


def test_the_horizon_is_one_now_for_every_action():
    h = run.horizon(MaintenanceSettings(retain="7d", in_flight_grace="1d", ledger_retain="90d"), NOW)
    assert (h.now - h.retain_before).days == 7 and (h.now - h.grace_before).days == 1
    assert (h.now - h.ledger_before).days == 90


def test_a_dry_run_lists_the_actions_and_changes_nothing(wired):
    pipeline, ledger, rec = wired
    result = run.maintain(pipeline, ledger, dry_run=True, now=NOW)
    assert [o.action.step for o in result.outcomes] == ["compact", "retention"]
    assert all(o.done is None for o in result.outcomes)
    assert rec.ran == [] and _events(ledger) == []


def test_a_pass_runs_each_sink_action_in_order_under_the_lock_and_is_audited(wired):
    pipeline, ledger, rec = wired
    result = run.maintain(pipeline, ledger, actor="cli:tester", now=NOW)
    assert rec.ran == [("compact", True), ("retention", True)]
    assert [o.done for o in result.outcomes] == [{"files": 2}, {"files": 2}]
    (k1, a1, started), (k2, a2, done) = _events(ledger)
    assert (k1, a1, started["status"]) == ("maintenance", "cli:tester", "started")
    assert (k2, a2, done["status"]) == ("maintenance", "cli:tester", "done")
    assert [a["done"] for a in done["actions"]] == [{"files": 2}, {"files": 2}]


def test_a_failing_action_stops_the_pass_and_the_audit_says_where_without_secrets(wired):
    pipeline, ledger, rec = wired
    rec.fail_at = "retention"
    with pytest.raises(OSError, match="disk full while retention"):
        run.maintain(pipeline, ledger, actor="cli:tester", now=NOW)
    assert rec.ran == [("compact", True)]
    _, _, failed = _events(ledger)[-1]
    assert failed["status"] == "failed"  # the stored error names the URL without its password
    assert failed["error"] == "OSError: disk full while retention (catalog postgresql://svc:***@db/cat)"
    assert [a["done"] for a in failed["actions"]] == [{"files": 2}, None]


def test_a_pass_the_task_runner_terminates_is_audited_as_failed_and_its_events_pair(wired):
    """Airflow ends a timed-out or killed-by-the-UI task with a ``BaseException``: the audit says so."""
    pipeline, ledger, rec = wired

    class Terminated(BaseException):
        pass

    def stop() -> dict[str, int]:
        raise Terminated("task received SIGTERM")
    pipeline.sink.maintenance = lambda policy, horizon: [Action("compact", "table /t", "compact", {}, stop)]
    with pytest.raises(Terminated):
        run.maintain(pipeline, ledger, actor="cli:tester", now=NOW)
    (_, _, started), (_, _, failed) = _events(ledger)[-2:]
    assert (started["status"], failed["status"]) == ("started", "failed")
    assert failed["error"] == "Terminated: task received SIGTERM" and started["pass_id"] == failed["pass_id"]


def test_the_maintain_command_names_a_failed_pass_in_one_line_without_secrets(wired, capsys):
    pipeline, ledger, rec = wired
    rec.fail_at = "retention"
    folder = str(pipeline.cfg.source_file).rsplit("/", 1)[0]
    assert cli.main(["--pipelines", folder, "maintain", "orders"]) == cli.EXIT_REFUSED
    err = capsys.readouterr().err
    [line] = [x for x in err.splitlines() if x.startswith("error:")]  # after the log line of the step done
    assert line.startswith("error: pipeline orders: the maintenance pass failed: OSError: disk full while retention "
                           "(catalog postgresql://svc:***@db/cat). `offsetbatch events orders` shows")
    assert "s3cret" not in err and "Traceback" not in err


def test_the_maintain_command_prints_the_plan_and_applies_it(wired, capsys):
    pipeline, ledger, rec = wired
    folder = str(pipeline.cfg.source_file).rsplit("/", 1)[0]
    assert cli.main(["--pipelines", folder, "maintain", "orders", "--dry-run"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "compact of 2 file(s)" in out and "dry run: nothing changed" in out and rec.ran == []
    assert cli.main(["--pipelines", folder, "--json", "maintain", "orders"]) == cli.EXIT_OK
    shown = json.loads(capsys.readouterr().out)
    assert shown["dry_run"] is False and [a["done"] for a in shown["actions"]] == [{"files": 2}, {"files": 2}]
    assert cli.main(["--pipelines", folder, "events", "orders"]) == cli.EXIT_OK
    assert "maintenance done in" in capsys.readouterr().out


def test_a_schedule_adds_a_maintenance_dag_in_the_pipelines_pool(tmp_path):
    from offsetbatch.dag.factory import pipeline_dags

    _config(tmp_path, schedule="30 3 * * *")
    dags = pipeline_dags(str(tmp_path / "pipelines"))
    assert set(dags) == {"offsetbatch_orders", "offsetbatch_orders_maintenance"}
    dag = dags["offsetbatch_orders_maintenance"]
    [task] = dag.tasks
    assert (task.task_id, task.pool, dag.timetable.expression) == ("maintain", "offsetbatch_orders", "30 3 * * *")
    _config(tmp_path)
    assert set(pipeline_dags(str(tmp_path / "pipelines"))) == {"offsetbatch_orders"}


def test_the_job_specs_of_summarized_batches_go_and_the_replayable_ones_stay(wired):
    """A replay reads its target's job spec; once the ledger summarized a batch nothing replays it."""
    from offsetbatch.ledger.schema import batches, history_batches
    from offsetbatch.model import OffsetRange

    pipeline, ledger, rec = wired
    with ledger.lock("orders") as conn:
        for _ in range(4):
            ledger.insert_batch(conn, "orders", "incremental", [OffsetRange("orders", 0, 0, 1, 0)], dag_id="d",
                                run_id=None, interval=(None, None), output_path="/t")
        conn.execute(batches.delete().where(batches.c.batch_id.in_([1, 2])))  # as the summary took them
        conn.execute(history_batches.insert().values(pipeline="orders", batches=2, replays=0, first_batch_id=1,
                                                     last_batch_id=2, updated_at=NOW))
    folder = pipeline.sink.staging.meta + "/plans"
    import os

    os.makedirs(folder)
    for i in (1, 2, 3, 4):
        open(f"{folder}/batch_id={i}.json", "w").write("{}")
    result = run.maintain(pipeline, ledger, now=NOW)
    assert result.outcomes[-1].action.step == "staging.drop-job-specs"
    assert result.outcomes[-1].done == {"job_specs": 2}
    assert sorted(os.listdir(folder)) == ["batch_id=3.json", "batch_id=4.json"]
