"""The fleet benchmark's pure arithmetic (``offsetbatch_dev.bench.fleet_probes`` and ``fleet``): the
CPU sampler's tree walk and its split of the scheduler from its task processes, the shared poll's
cycles read from the probe's lines, the lag rule per pipeline and the capacity formula."""

from __future__ import annotations

from offsetbatch_dev.bench import fleet, fleet_probes
from offsetbatch_dev.bench.fleet_probes import Proc, Sampler


def test_descendants_walk_the_tree_with_depths():
    procs = {1: Proc(1, 0, 0, 0, 0), 10: Proc(10, 1, 0, 0, 0), 11: Proc(11, 10, 0, 0, 0), 12: Proc(12, 11, 0, 0, 0),
             20: Proc(20, 1, 0, 0, 0)}
    assert sorted(fleet_probes.descendants(procs, 10)) == [(10, 0), (11, 1), (12, 2)]
    assert fleet_probes.descendants(procs, 99) == []


def test_sampler_splits_the_scheduler_and_keeps_time_of_reaped_tasks(monkeypatch):
    # scheduler 10 -> executor worker 11 -> task 12; then the task exits and the worker reaps it
    states = [
        {10: Proc(10, 1, 5.0, 0.0, 100), 11: Proc(11, 10, 1.0, 0.0, 200), 12: Proc(12, 11, 2.0, 0.0, 300)},
        {10: Proc(10, 1, 6.0, 0.0, 100), 11: Proc(11, 10, 1.0, 3.5, 200)},
    ]
    monkeypatch.setattr(fleet_probes, "read_procs", lambda: states.pop(0))
    s = Sampler({"scheduler": 10}, split={"scheduler": "task processes"})
    s.sample()
    s.sample()
    assert s.usage["scheduler"].cpu_s == 1.0
    assert s.usage["task processes"].cpu_s == 1.5  # 3.0 -> 4.5: the task's last 1.5 s, seen through cutime
    assert s.usage["task processes"].peak_rss == 500
    assert s.usage["task processes"].peak_one_rss == 300  # depth 2: a task process, not the worker


def test_poll_cycles_pair_reads_with_the_last_decision(tmp_path):
    probe = tmp_path / "probe.txt"
    probe.write_text("read 100.0 100.2\ndecide 100.2 100.21 100.3\ndecide 100.2 100.22 100.9\n"
                     "read 105.0 105.1\n"  # nobody decided on this one
                     "read 200.0 200.1\ndecide 200.1 200.1 200.2\n")
    reads, cycles, undecided = fleet.poll_cycles(probe, 50.0, 150.0)
    assert [round(x, 3) for x in reads] == [0.2, 0.1]
    assert [round(x, 3) for x in cycles] == [0.9]
    assert undecided == 1


def test_rule_runs_each_pipeline_about_every_cadence():
    assert fleet.rule_for(2000, 100, 60, 5) == {"min_records": 1200, "max_delay": "60s", "poll": "5s"}
    assert fleet.rule_for(10, 100, 60, 5)["min_records"] == 6


def test_capacity_formula():
    # 0.7 x 2 cores x 3600 s / (10 CPU-s x 60 runs/h) = 8.4
    assert fleet_probes.capacity(2, 10.0, 60) == 8
    assert fleet_probes.capacity(2, 10.0, 1) == 504
    assert fleet_probes.capacity(2, 0.0, 1) == 0
