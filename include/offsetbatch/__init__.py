"""offsetbatch: exactly-once Kafka micro-batches, planned in an offsets ledger, run by Airflow and Spark."""

__version__ = "0.1.0"
