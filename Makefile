# One entry point for people and CI. `make demo` and `make test` both install what is missing first.
SHELL := /bin/bash
.DEFAULT_GOAL := help

.PHONY: help setup demo test test-unit test-deploy deploy-up deploy-down bench bench-ui bench-fleet bench-cluster stack-up stack-down stack-wipe

help:
	@echo "make demo    install everything, then run the sample pipeline end to end (embedded defaults)"
	@echo "             make demo SINK=iceberg: its Iceberg variant (one snapshot per batch, read back with pyiceberg)"
	@echo "             make demo SINK=delta: its Delta Lake variant (one Delta commit per batch, read back with Polars)"
	@echo "             make demo FORMAT=avro: on Confluent-framed Avro (two schema versions, prefix and header forms;"
	@echo "             a stand-in schema registry, tests/schema_registry_server.py, runs for the demo)"
	@echo "             make demo FORMAT=protobuf: the same on Confluent-framed Protobuf (value.format confluent-protobuf)"
	@echo "make test    install everything, then run the whole test suite (unit + integration, then test-deploy)"
	@echo "make test-deploy  build the images and prove docker-compose.yaml's stack (about 10 min: Celery workers, faults; needs root or sudo)"
	@echo "make deploy-up / deploy-down   the container stack (scripts/deploy.sh up / down)"
	@echo "make bench   benchmarks (about 60 min, on a quiet machine): docs/benchmarks.md; BENCH_ARGS='--sizes 500000 --repeat 3' for a quick one"
	@echo "make bench-ui  UI plugin page times with 10,000 batches vs 100 (about 3 min): docs/ui-benchmark.md"
	@echo "make bench-growth  a ledger grown to 100,000 batches and each sink to 2,880, with maintenance (issue 43; about 25 min): docs/benchmarks.md"
	@echo "make bench-fleet  N = 10, 50, 100 pipelines under lag triggers on one Airflow (issue 53; about 50 min): docs/benchmarks.md"
	@echo "make bench-delta  the delta sink's commit beside iceberg and files, and 2,880 batches with maintenance (about 10 min)"
	@echo "make bench-cluster  the job on a Spark standalone cluster vs local[*], planning at 10,000 partitions (about 15 min)"
	@echo "make setup   install only (idempotent)"
	@echo "make stack-up / stack-down / stack-wipe   local Kafka broker, PostgreSQL and Spark Connect server"

setup:
	@scripts/setup.sh

demo: setup
	@DEMO_SINK="$(SINK)" DEMO_FORMAT="$(FORMAT)" scripts/demo.sh

test: setup
	@. scripts/env.sh && scripts/run-tests.sh && scripts/test-deploy.sh

test-deploy: setup
	@. scripts/env.sh && scripts/test-deploy.sh

deploy-up:
	@scripts/deploy.sh up

deploy-down:
	@scripts/deploy.sh down

bench: setup
	@. scripts/env.sh && python -m offsetbatch_dev.bench $(BENCH_ARGS)

bench-ui: setup
	@. scripts/env.sh && python -m offsetbatch_dev.bench.ui_pages $(BENCH_ARGS)

.PHONY: bench-growth
bench-growth: setup
	@. scripts/env.sh && python -m offsetbatch_dev.bench.growth $(BENCH_ARGS)

.PHONY: bench-delta
bench-delta: setup
	@. scripts/env.sh && python -m offsetbatch_dev.bench.delta_sink $(BENCH_ARGS)

bench-fleet: setup
	@. scripts/env.sh && python -m offsetbatch_dev.bench.fleet $(BENCH_ARGS)

bench-cluster: setup
	@. scripts/env.sh && python -m offsetbatch_dev.bench.cluster $(BENCH_ARGS)

test-unit: setup
	@. scripts/env.sh && pytest -q tests/unit

stack-up: setup
	@. scripts/env.sh && offsetbatch-stack kafka start && offsetbatch-stack postgres start && offsetbatch-stack spark-connect start

stack-down:
	@. scripts/env.sh && offsetbatch-stack spark-connect stop; offsetbatch-stack kafka stop; offsetbatch-stack postgres stop

stack-wipe:
	@. scripts/env.sh && offsetbatch-stack spark-connect wipe; offsetbatch-stack kafka wipe; offsetbatch-stack postgres wipe
