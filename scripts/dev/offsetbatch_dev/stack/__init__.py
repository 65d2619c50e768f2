"""The local stack used by the README commands and the integration tests.

A real Apache Kafka broker (KRaft) and a throwaway PostgreSQL cluster, both bound to 127.0.0.1,
plus the Java artifacts Spark needs to read Kafka offline. Nothing here is used in production.
"""
