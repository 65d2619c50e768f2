"""Development tooling: benchmarks, the local stack (Kafka broker, PostgreSQL, artifacts), sample data,
the demo and the verification readers. Nothing in the runtime path imports it."""

from pathlib import Path

# The repository: development tooling runs only from a checkout.
PROJECT_ROOT = Path(__file__).resolve().parents[3]
