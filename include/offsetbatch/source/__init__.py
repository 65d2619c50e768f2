"""Kafka as the planner, commit and CLI see it: the Airflow connection, the admin client, why a connection failed, partitions."""
