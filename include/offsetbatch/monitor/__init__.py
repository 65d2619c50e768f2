"""The read side for operators: what the Airflow UI plugin (``offsetbatch.monitor.plugin``) and its
JSON API show. Everything comes from the ledger (through each pipeline's config) and from Kafka's
log ends, never from Airflow's own database. The paged, indexed ledger reads behind the pages
(keyset paging; one query per page, not one per batch) are ``offsetbatch.ledger.queries``.

    health   the warning rules of the Pipelines page (pure)
    chart    the lag-over-time chart as inline SVG (pure; no script, no CDN)
    views    HTML pages (Jinja2 templates in ``templates/``)
    sources  the configs, ledgers and Kafka clients one API-server process keeps open
    pages    what each page and JSON answer holds (plain dicts; no web framework)
    app      the FastAPI routes over ``pages``: Airflow authentication required, errors as statuses
"""
