"""Trigger values that would lose data, or fill the audit log, by misconfiguration: each fails the
plan task at once (Airflow's AirflowFailException: no retry, although the pipeline has 2 retries
120 s apart), names the pipeline and the value, and leaves the ledger and the table unchanged.

* a misspelled key (``mdoe``) used to be ignored and run a plain batch;
* a reset to a timestamp after the newest record used to turn every unread record into gap rows;
* a 1 MB ``reason`` used to be stored whole in the audit table and logged whole.

Three DAG runs, plan task only (no Spark job): the partitions are started with the CLI's reset.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest
from harness import HELPER, RunOutcome

pytestmark = pytest.mark.integration
BASE = datetime(2026, 10, 12, tzinfo=timezone.utc)
RETRY_DELAY_S = 120  # a retry would add 2 minutes; one run takes 10-40 s, on a loaded 2-core machine too
FUTURE = "2030-01-01T00:00:00+00:00"


def _cli(p, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["offsetbatch", "--pipelines", str(p.root), *args], env=p.env, capture_output=True,
                          text=True, timeout=120)


def _run(p, conf: dict) -> RunOutcome:
    """``p.run(None, conf=conf)``, but the conf reaches the harness's runner through a file: Linux
    refuses a single command-line argument over 128 KiB, and the 1 MB reason is one."""
    p.runs += 1
    run_after = datetime(2030, 1, 1, tzinfo=timezone.utc) + timedelta(minutes=p.runs)
    conf_file = p.root / f"conf-{p.runs}.json"
    conf_file.write_text(json.dumps(conf))
    code = ("import runpy, sys; sys.argv = [*sys.argv[1:4], 'none', sys.argv[4], open(sys.argv[5]).read()]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code, str(HELPER), str(p.dag_file), p.dag_id, run_after.isoformat(),
                           str(conf_file)],
                          env=p.env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    (p.root / "runs").mkdir(exist_ok=True)
    (p.root / "runs" / f"{run_after:%Y%m%dT%H%M%S}-refusal.log").write_text(out)
    ok = proc.returncode == 0 and "DagRunState.FAILED" not in out and "state=failed" not in out
    return RunOutcome(ok, out, run_after)


def test_refused_trigger_values_fail_at_once_and_change_nothing(make_pipeline):
    p = make_pipeline(airflow={"retries": 2, "retry_delay_seconds": RETRY_DELAY_S})
    p.produce(300, start=BASE, hours=1, partitions=2)
    started = _cli(p, "reset", p.name, "--to", "earliest", "--apply", "--reason", "start at the beginning")
    assert started.returncode == 0, started.stdout + started.stderr
    refused = _cli(p, "reset", p.name, "--to", FUTURE, "--apply")  # the CLI refuses it too (exit 4: refused)
    assert refused.returncode == 4 and "is after the newest record of every partition" in refused.stderr, \
        refused.stdout + refused.stderr

    before, events = p.snapshot(), p.ledger.list_events(p.name)
    assert before["frontier"] and not before["gaps"]  # tracked from offset 0: a forward reset would record gaps
    known = "the known ones are mode, replay_start, replay_end, batch_ids, allow_more_rejected, reset_to, dry_run, " \
            "allow_rewind, allow_data_loss, reason. Fix the spelling and trigger again. Nothing was changed."
    cases = [
        ({"mdoe": "reset", "reset_to": "latest", "dry_run": False},
         f"pipeline {p.name}: unknown trigger parameter(s) 'mdoe' (did you mean 'mode'?); {known}"),
        ({"mode": "reset", "reset_to": FUTURE, "dry_run": False},
         f"pipeline {p.name}: reset_to {FUTURE} is after the newest record of every partition, so it would skip "
         f"all 300 unread records ("),
        ({"mode": "next", "reason": "r" * 1_000_000},
         f"pipeline {p.name}: reason is 1,000,000 characters long, more than the 1,000 allowed (it is kept in the "
         f"ledger's audit log); shorten it, e.g. to a sentence and a ticket link. Nothing was changed."),
    ]
    for conf, message in cases:
        started_at = time.monotonic()
        out = _run(p, conf)
        took = time.monotonic() - started_at
        out.assert_failed_with(message)
        assert "AirflowFailException" in out.output, out.output[-4000:]
        # A retry would wait out the 30 s delay, then start the plan task a second time.
        assert took < RETRY_DELAY_S and out.output.count("[DAG TEST] starting task_id=plan ") == 1 \
            and "up_for_retry" not in out.output.lower(), f"{took:.1f}s\n{out.output[-4000:]}"
        assert p.snapshot() == before, f"ledger or table changed by {list(conf)}"
        assert p.ledger.list_events(p.name) == events
    assert "r" * 2000 not in out.output  # the refused reason is not logged by offsetbatch
