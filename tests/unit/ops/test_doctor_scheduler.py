"""``offsetbatch doctor`` checks that the scheduler creates a run for every lag-triggered pipeline
that wants one in one loop: below that, Airflow creates the same pipelines' runs first every loop
(docs/architecture.md, "A fleet on one Airflow")."""

from __future__ import annotations

import pytest

from offsetbatch.ops.doctor import _runs_created_per_loop

ENV = "AIRFLOW__SCHEDULER__MAX_DAGRUNS_TO_CREATE_PER_LOOP"


def test_fewer_runs_per_loop_than_triggered_pipelines_is_reported_with_the_number(monkeypatch):
    monkeypatch.setenv(ENV, "10")
    with pytest.raises(RuntimeError, match="is 10, fewer than the 100 lag-triggered pipelines"):
        _runs_created_per_loop(100)


@pytest.mark.parametrize("per_loop, triggered", [("10", 10), ("1000", 100)])
def test_enough_runs_per_loop_passes(monkeypatch, per_loop, triggered):
    monkeypatch.setenv(ENV, per_loop)
    assert _runs_created_per_loop(triggered) == f"{per_loop} per loop, for {triggered} lag-triggered pipeline(s)"
