"""One open ``Ledger`` per database URL in a long-lived process, shared by its users.

The triggerer runs a lag trigger per pipeline, each keeping its ledger open between polls. With an
engine each, N pipelines on one ledger database would hold N engines and at least N idle connections
(PostgreSQL's default ``max_connections`` is 100: a fleet of 100 would use them all before a task
opened one). Shared, they hold one engine, whose pool bounds the connections (SQLAlchemy's
``QueuePool``: 5 kept, 15 at most), and the schema is checked once per database, not per trigger.
"""

from __future__ import annotations

import threading

from offsetbatch.ledger.store import Ledger

_lock = threading.Lock()
_open: dict[str, list] = {}  # url -> [Ledger, users]


def acquire(url: str) -> Ledger:
    """The process's ledger of ``url``, opened on first use (``LedgerMissingError`` if none exists:
    nothing is kept then); give it back with ``release``, never ``dispose``."""
    with _lock:
        entry = _open.get(url)
        if entry is None:
            entry = _open[url] = [Ledger(url), 0]
        entry[1] += 1
        return entry[0]


def release(ledger: Ledger) -> None:
    """One user fewer; the last one's release closes the engine. A ledger this module did not open
    is closed at once."""
    with _lock:
        entry = _open.get(ledger.url)
        if entry is None or entry[0] is not ledger:
            ledger.dispose()
            return
        entry[1] -= 1
        if entry[1] == 0:
            del _open[ledger.url]
            ledger.dispose()


def users(url: str) -> int:
    """How many users hold the ledger of ``url`` (0: not open)."""
    with _lock:
        entry = _open.get(url)
        return entry[1] if entry else 0
