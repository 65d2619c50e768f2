"""Whether the machine is quiet enough to measure on: a benchmark's ratios mean something only if
nothing else competes for the cores (on 2 cores one stray Spark job halves a run's speed).

Two readings: before a benchmark starts, the 1-minute load average (what other work has been doing);
before each measurement, the CPU the whole machine used over a short window while the benchmark
itself sits idle between runs (its broker and servers idle too), which catches a process that started
after the benchmark did. Busy at the start: refused unless ``--allow-load``; busy before a
measurement: a loud warning, and the sample is flagged in the report.
"""

from __future__ import annotations

import os

import psutil
from rich.console import Console

LOAD_LIMIT = 0.5  # per core, 1-minute load average, before the benchmark starts
BUSY_LIMIT = 20.0  # % of all cores used while the benchmark is idle between measurements


class NoisyMachine(SystemExit):
    """The machine is busy with other work: the benchmark refuses to start."""


def check_start(console: Console, allow: bool) -> str | None:
    """Refuse (``NoisyMachine``) to start on a loaded machine unless ``allow``; returns the warning
    that the report carries when allowed anyway, None on a quiet machine."""
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0]
    busy = psutil.cpu_percent(interval=3.0)
    if load <= LOAD_LIMIT * cores and busy <= BUSY_LIMIT:
        return None
    text = (f"the machine is not quiet: 1-minute load average {load:.2f} on {cores} cores (limit "
            f"{LOAD_LIMIT * cores:.1f}), {busy:.0f} % CPU busy over 3 s before starting (limit {BUSY_LIMIT:.0f} %)")
    if not allow:
        raise NoisyMachine(f"{text}. Stop the other work (see `top`) and run again, or pass --allow-load to measure "
                           f"anyway (the report then says so).")
    console.print(f"[bold red]WARNING: {text}; measuring anyway (--allow-load). Ratios may be off.[/]")
    return text


def busy_before_run(console: Console, what: str) -> float:
    """% CPU the machine used over the second before a measurement (the benchmark idle); warns
    loudly above ``BUSY_LIMIT``."""
    busy = psutil.cpu_percent(interval=1.0)
    if busy > BUSY_LIMIT:
        console.print(f"[bold red]WARNING: {busy:.0f} % CPU busy before {what}, with the benchmark idle: something "
                      f"else is running; this sample is flagged in the report.[/]")
    return busy
