#!/usr/bin/env bash
# Kafka's own kafka-consumer-groups tool, run from the broker jars cached by `make setup`.
#   scripts/kafka-consumer-groups.sh --bootstrap-server 127.0.0.1:9092 --describe --group offsetbatch.sample_events
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
LIBS=$(ls -d "$ROOT"/.cache/kafka-*/libs 2>/dev/null | tail -1)
[ -n "$LIBS" ] || { echo "Kafka jars not cached; run 'make setup' first" >&2; exit 2; }
exec java -cp "$LIBS/*" org.apache.kafka.tools.consumer.group.ConsumerGroupCommand "$@" 2> >(grep -v '^SLF4J' >&2)
