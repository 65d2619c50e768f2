"""The lag-over-time chart as inline SVG: no script, no CDN, readable inside Airflow's sandboxed
iframe and in a screenshot. Pure (unit-tested)."""

from __future__ import annotations

from datetime import datetime, timezone
from html import escape

W, H = 760, 220
PAD_L, PAD_R, PAD_T, PAD_B = 64, 16, 16, 36


def _ticks(top: int, n: int = 4) -> list[int]:
    if top <= 0:
        return [0]
    step = max(1, top // n)
    return list(range(0, top + 1, step))[: n + 1]


def _label(t: float) -> str:
    """Axis-end label: the time of the newest point or gap, ``2030-01-01 03:00:00``."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def lag_svg(points: list[dict], gaps: list[dict] | None = None) -> str:
    """``points``: ``ledger.queries.lag_history`` (oldest first). Blue: lag when each batch was
    planned; grey: lag left after it. Red lines: data-loss gaps, at the time they were recorded.

    The time axis runs from the oldest point to the newest point or the newest gap, whichever is
    later: a gap recorded after the last batch (a forward reset, or retention found by a run that
    then failed) is the one an operator most needs to see. Gaps older than the oldest point stay
    off the chart; the Data-loss gaps table lists them."""
    if not points:
        return (f'<svg class="chart" role="img" aria-label="lag chart: no history" viewBox="0 0 {W} 60" '
                f'xmlns="http://www.w3.org/2000/svg"><text x="8" y="34">No lag history yet (recorded from the '
                f'first incremental batch planned by this version).</text></svg>')
    times = [datetime.fromisoformat(p["at"]).timestamp() for p in points]
    t0 = min(times)
    shown = [(t, g) for g in gaps or [] if (t := datetime.fromisoformat(g["detected_at"]).timestamp()) >= t0]
    t1 = max([*times, *(t for t, _ in shown)])
    span = (t1 - t0) or 1.0
    top = max(max(p["lag"] for p in points), 1)
    iw, ih = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def x(t: float) -> float:
        return PAD_L + (iw * (t - t0) / span if t1 > t0 else iw / 2)

    def y(v: int) -> float:
        return PAD_T + ih - ih * v / top

    lag = " ".join(f"{x(t):.1f},{y(p['lag']):.1f}" for t, p in zip(times, points))
    after = " ".join(f"{x(t):.1f},{y(p['lag_after']):.1f}" for t, p in zip(times, points))
    parts = [f'<svg class="chart" role="img" aria-label="lag over time, {len(points)} batches" viewBox="0 0 {W} {H}" '
             f'xmlns="http://www.w3.org/2000/svg">']
    for v in _ticks(top):
        parts.append(f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid"/>'
                     f'<text x="{PAD_L - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:,}</text>')
    for t, g in shown:
        parts.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{PAD_T}" y2="{PAD_T + ih}" class="gap">'
                     f'<title>gap {escape(g["topic"])}/{g["partition"]} [{g["from_offset"]}, {g["until_offset"]}) '
                     f'{escape(g["reason"])}, recorded {escape(g["detected_at"][:19].replace("T", " "))}</title></line>')
    parts.append(f'<polyline points="{after}" class="after"/><polyline points="{lag}" class="lag"/>')
    for t, p in zip(times, points):
        parts.append(f'<circle cx="{x(t):.1f}" cy="{y(p["lag"]):.1f}" r="3" class="pt {escape(p["status"])}">'
                     f'<title>batch {p["batch_id"]} at {escape(p["at"])}: lag {p["lag"]:,}, read {p["records"]:,}, '
                     f'left {p["lag_after"]:,}</title></circle>')
    parts.append(f'<text x="{PAD_L}" y="{H - 10}">{escape(points[0]["at"][:19].replace("T", " "))}</text>'
                 f'<text x="{W - PAD_R}" y="{H - 10}" text-anchor="end">{_label(t1)} UTC</text>')
    parts.append("</svg>")
    return "".join(parts)
