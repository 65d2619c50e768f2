"""Kafka as the planner, commit and CLI see it: the Airflow connection, the admin client, why a connection failed,
partitions; and the schema registry an Avro topic's records name their schemas in."""
