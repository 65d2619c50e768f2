"""The Airflow UI plugin of offsetbatch: where each Kafka pipeline stands, inside the Airflow UI.

* a **Kafka pipelines** entry in the navigation (all pipelines: lag, last batch, 24 h figures),
* a **Kafka pipeline** tab on each DAG (batch history, lag chart, data-loss gaps),
* a **Kafka batches** tab on each DAG run (the batches that run planned, ranges, stats, output).

The pages and the JSON API are one FastAPI app (``offsetbatch.monitor.app``) mounted at
``/offsetbatch``; all of it requires an Airflow login. Pipelines come from ``OFFSETBATCH_PIPELINES``.
Airflow finds the plugin through the package's ``airflow.plugins`` entry point: installing the wheel
is enough, nothing goes into the plugins folder.
"""

from airflow.plugins_manager import AirflowPlugin

from offsetbatch.monitor.app import create_app

PREFIX = "/offsetbatch"
ICON = ("data:image/svg+xml;utf8,<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 24 24' fill='none' "
        "stroke='%23888' stroke-width='2'><path d='M4 6h16M4 12h10M4 18h6'/><circle cx='19' cy='16' r='3'/></svg>")


class OffsetbatchUIPlugin(AirflowPlugin):
    name = "offsetbatch"
    fastapi_apps = [{"app": create_app(), "url_prefix": PREFIX, "name": "offsetbatch"}]
    external_views = [
        {"name": "Pipelines", "href": f"{PREFIX}/", "destination": "nav", "url_route": "kafka-pipelines",
         "icon": ICON, "nav_top_level": True},
        {"name": "Kafka pipeline", "href": f"{PREFIX}/dags/{{DAG_ID}}", "destination": "dag",
         "url_route": "kafka-pipeline"},
        {"name": "Kafka batches", "href": f"{PREFIX}/runs/{{DAG_ID}}/{{RUN_ID}}", "destination": "dag_run",
         "url_route": "kafka-batches"},
    ]
