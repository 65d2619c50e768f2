"""The small-batch bench's report: the warm-up runs stay out of the medians and ratios, and the
report says which runs it counted (the runs themselves need a Connect server: the bench's own)."""

from __future__ import annotations

from offsetbatch_dev.bench.small_batch import section


def _report(warm: int) -> str:
    jobs = [3.0, 1.0, 0.5, 0.6, 0.7]
    return "\n".join(section(10_000, jobs, [j + 0.3 for j in jobs], [0.25] * 5, [0.5, 0.5, 0.4, 0.4, 0.5], [0.0] * 5,
                             "cmd", None, ("job calls", "raw calls"), warm=warm))


def test_the_warm_up_runs_stay_out_of_the_medians_and_ratios():
    text = _report(warm=2)
    assert "| median of runs 3..5 (s) |" in text
    assert "| the job (`job_seconds`) | **0.60** | 3.00, 1.00, 0.50, 0.60, 0.70 |" in text  # every run listed
    assert "Job / raw read: 2.40x (per counted run: 2.00, 2.40, 2.80)" in text
    assert "Job / no-check floor: 1.50x (per counted run: 1.25, 1.50, 1.40)" in text
    assert "the first 2 run(s) warm it and are not counted" in text


def test_the_server_s_jit_cpu_is_given_for_the_counted_and_the_warm_up_rounds():
    jobs = [3.0, 1.0, 0.5, 0.6, 0.7]
    text = "\n".join(section(10_000, jobs, jobs, [0.25] * 5, [0.5] * 5, [0.0] * 5, "cmd", None, warm=2,
                             jits=[2.0, 0.8, 0.3, None, 0.1]))
    assert ("The server's JIT compiler threads used 0.20 s of CPU per counted round (median; the rounds' job, raw "
            "read and floor together), 1.40 s per warm-up round.") in text
    assert "JIT compiler" not in "\n".join(section(10_000, jobs, jobs, [0.25] * 5, [0.5] * 5, [0.0] * 5, "cmd", None,
                                                    warm=2, jits=[None] * 5))


def test_at_least_one_run_is_counted():
    text = _report(warm=9)
    assert "| median of runs 5..5 (s) |" in text
    assert "**0.70**" in text
