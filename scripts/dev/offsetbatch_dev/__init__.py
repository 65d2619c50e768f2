"""Development tooling: benchmarks, the local stack (Kafka broker, PostgreSQL, artifacts), sample data,
the demo and the verification readers. Nothing in the runtime path imports it."""
