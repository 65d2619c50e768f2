"""What the fleet benchmark samples while it runs (``fleet``): CPU-seconds and RSS of each
service's process tree from /proc, and the pure arithmetic of its figures (percentiles, the
capacity formula), kept apart so a unit test can check them without a stack.

CPU of a tree: the sum, over its live processes, of utime + stime + cutime + cstime (/proc/<pid>/stat,
clock ticks). A process that exits is reaped by its parent, whose cutime/cstime then holds all of its
time, so the sum stays continuous while task processes come and go between two samples; a process
re-parented out of the tree (to init) takes its time with it, and the sampler only ever adds the
positive steps of the sum, so such a drop is not subtracted from what was already counted.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

import numpy as np

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Proc:
    pid: int
    ppid: int
    own: float  # utime + stime, seconds
    reaped: float  # cutime + cstime, seconds
    rss: int  # bytes


def read_procs() -> dict[int, Proc]:
    """Every process's parent, CPU seconds and RSS, from /proc (those that vanish mid-read are skipped)."""
    out: dict[int, Proc] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                raw = f.read().decode(errors="replace")
        except OSError:
            continue
        # the command name (field 2) may hold spaces and parentheses: split after its last ')'
        fields = raw[raw.rfind(")") + 2:].split()
        # fields[0] is field 3 (state); utime..cstime are fields 14..17, rss field 24
        out[int(entry)] = Proc(int(entry), int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK,
                               (int(fields[13]) + int(fields[14])) / TICK, int(fields[21]) * PAGE)
    return out


def descendants(procs: dict[int, Proc], root: int) -> list[tuple[int, int]]:
    """``(pid, depth)`` of ``root`` (depth 0) and every live descendant."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out, todo = [], [(root, 0)] if root in procs else []
    while todo:
        pid, depth = todo.pop()
        out.append((pid, depth))
        todo += [(c, depth + 1) for c in children.get(pid, [])]
    return out


@dataclass
class Usage:
    """One service's totals over a window: CPU seconds (positive steps only), peak RSS of its tree,
    peak RSS of one of its processes (``split_depth`` and deeper: a task process)."""

    cpu_s: float = 0.0
    peak_rss: int = 0
    peak_one_rss: int = 0
    last: float | None = None
    samples: int = 0


@dataclass
class Sampler:
    """Samples every ``interval`` s the process trees of ``roots`` (service -> pid); the
    ``split`` services' descendants (depth >= 1) are counted as ``split[service]`` instead (the
    scheduler's LocalExecutor workers and the task processes they fork). Start/stop brackets the
    measured window."""

    roots: dict[str, int]
    split: dict[str, str] = field(default_factory=dict)
    interval: float = 2.0
    usage: dict[str, Usage] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [*self.roots, *self.split.values()]
        self.usage = {n: Usage() for n in names}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        procs = read_procs()
        for service, root in self.roots.items():
            totals: dict[str, float] = {service: 0.0}
            rss: dict[str, int] = {service: 0}
            one = 0
            other = self.split.get(service)
            if other:
                totals[other], rss[other] = 0.0, 0
            for pid, depth in descendants(procs, root):
                p = procs[pid]
                if other and depth == 0:
                    # the root's own time; what it reaped (an executor worker that exited) goes to the split
                    totals[service] += p.own
                    totals[other] += p.reaped
                    rss[service] += p.rss
                    continue
                name = other if other else service
                totals[name] += p.own + p.reaped
                rss[name] += p.rss
                if other and depth >= 2:
                    one = max(one, p.rss)
            for name, total in totals.items():
                u = self.usage[name]
                if u.last is not None and total > u.last:
                    u.cpu_s += total - u.last
                u.last = total  # after a drop (a process left the tree) the next steps count from here
                u.peak_rss = max(u.peak_rss, rss[name])
                u.samples += 1
            if other:
                self.usage[other].peak_one_rss = max(self.usage[other].peak_one_rss, one)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a sample lost is a sample; the next one comes
                pass

    def start(self) -> None:
        self.sample()  # the baseline: only time used after it counts
        self._thread = threading.Thread(target=self._loop, name="fleet-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, Usage]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.sample()
        return self.usage


def percentiles(values, qs=(50, 95)) -> dict[str, float | None]:
    """p50/p95/max of ``values`` (None when empty)."""
    arr = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=float)
    if arr.size == 0:
        return {**{f"p{q}": None for q in qs}, "max": None}
    return {**{f"p{q}": float(np.percentile(arr, q)) for q in qs}, "max": float(arr.max())}


CADENCES = {"hourly": 1, "5-minute": 12, "1-minute": 60}  # runs per hour of one pipeline
UTILISATION = 0.7  # the share of the cores a deployment may spend on runs and still keep its lag triggers on time


def capacity(cores: int, cpu_s_per_batch: float, runs_per_hour: float, utilisation: float = UTILISATION) -> int:
    """How many pipelines ``cores`` carry at ``runs_per_hour`` each, when every batch costs
    ``cpu_s_per_batch`` CPU-seconds over all services (the services' idle work included, shared out
    over the batches of the measured run): floor(utilisation x cores x 3600 / (cpu_s_per_batch x runs_per_hour))."""
    if cpu_s_per_batch <= 0 or runs_per_hour <= 0:
        return 0
    return int(utilisation * cores * 3600 // (cpu_s_per_batch * runs_per_hour))
