"""HTML of the UI pages: Jinja2 templates (autoescaped) in ``templates/``, plain server-rendered
pages that work in Airflow's plugin iframe without any script."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape


def num(v) -> str:
    if v is None:
        return "—"
    return f"{v:,}" if isinstance(v, int) else f"{v:,.1f}"


def duration(seconds) -> str:
    """``95`` → ``1 m 35 s``; ``None`` → ``—``."""
    if seconds is None:
        return "—"
    s = int(round(seconds))
    if s < 60:
        return f"{seconds:.1f} s" if seconds < 10 and seconds != int(seconds) else f"{s} s"
    if s < 3600:
        return f"{s // 60} m {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} m"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def ts(value: str | None) -> str:
    """ISO timestamp → ``2026-11-22 03:28:51`` (UTC, as stored)."""
    return value[:19].replace("T", " ") if value else "—"


def file_url(path: str | None) -> str:
    if not path:
        return "#"
    return path if "://" in path else f"file://{quote(path)}"


_env = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                   autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
_env.filters.update(num=num, duration=duration, ts=ts, file_url=file_url, urlq=lambda v: quote(str(v), safe=""))


def render(template: str, **context) -> str:
    context.setdefault("now", datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S"))
    return _env.get_template(template).render(**context)
