"""The offsetbatch UI plugin for an Airflow that has the package's files but not its installed
metadata (a plugins folder or ``plugins.zip`` deployment with ``include/`` on ``PYTHONPATH``).

An installed offsetbatch (``pip install offsetbatch``, the image, a checkout after ``make setup``)
registers the plugin through its ``airflow.plugins`` entry point (``offsetbatch.monitor.plugin``);
this file then defines nothing, or Airflow would report the second copy as a plugin import error.
"""

from importlib.metadata import entry_points

if not any(ep.value.startswith("offsetbatch.") for ep in entry_points(group="airflow.plugins")):
    from offsetbatch.monitor.plugin import OffsetbatchUIPlugin  # noqa: F401
