"""Airflow operators of offsetbatch."""
