"""Where offsetbatch keeps its caches and local state, in a source checkout and when installed.

In a checkout (``include/offsetbatch`` inside the repository), everything machine-local lives under
two ignored folders of the repository: ``.cache/`` (artifacts resolved once from Maven Central) and
``.local/`` (broker data, PostgreSQL cluster, Airflow home, SQLite ledger, sample output). Installed
from the wheel into an Airflow of its own, there is no repository: state goes under
``$AIRFLOW_HOME/offsetbatch`` (Airflow's own default home is ``~/airflow``) and caches under
``$XDG_CACHE_HOME/offsetbatch``. ``OFFSETBATCH_HOME`` and ``OFFSETBATCH_CACHE`` move either; tests use
them for a private stack.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
_ROOT = PACKAGE_DIR.parents[1]
# The repository this package runs from, or None for an installed wheel (site-packages/offsetbatch).
CHECKOUT: Path | None = (_ROOT if PACKAGE_DIR.parent.name == "include" and (_ROOT / "pyproject.toml").is_file()
                         else None)
# The PySpark application spark-submit runs, shipped inside the package (jobs/offsetbatch_job.py in a
# checkout is a link to it). Alone in its folder: the folder of a script is first on its sys.path.
SPARK_APP = PACKAGE_DIR / "job" / "spark_app" / "offsetbatch_job.py"


def cache_dir() -> Path:
    if env := os.environ.get("OFFSETBATCH_CACHE"):
        return Path(env)
    if CHECKOUT is not None:
        return CHECKOUT / ".cache"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "offsetbatch"


def local_dir() -> Path:
    if env := os.environ.get("OFFSETBATCH_HOME"):
        return Path(env)
    if CHECKOUT is not None:
        return CHECKOUT / ".local"
    return Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow") / "offsetbatch"


def bundled_pipelines_dir() -> Path | None:
    """The checkout's sample pipelines (``include/pipelines``); an installed package has none, so its
    pipelines come from ``OFFSETBATCH_PIPELINES`` only."""
    return CHECKOUT / "include" / "pipelines" if CHECKOUT is not None else None
