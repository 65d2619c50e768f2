"""Where the project keeps its caches and local state.

Everything machine-local lives under two ignored folders of the project root: ``.cache/``
(artifacts resolved once from Maven Central) and ``.local/`` (broker data, PostgreSQL cluster,
Airflow home, SQLite ledger, sample output). ``OFFSETBATCH_HOME`` moves ``.local/`` elsewhere,
which tests use to get a private stack.
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    return Path(os.environ.get("OFFSETBATCH_CACHE", PROJECT_ROOT / ".cache"))


def local_dir() -> Path:
    return Path(os.environ.get("OFFSETBATCH_HOME", PROJECT_ROOT / ".local"))
