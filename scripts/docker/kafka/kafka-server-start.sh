#!/bin/bash
# kafka-server-start.sh server.properties: the broker in the foreground (PID 1 when exec'd by the
# entrypoint), logging INFO to stdout; a 1 GiB heap unless KAFKA_HEAP_OPTS says otherwise (upstream's
# default).
export KAFKA_HEAP_OPTS=${KAFKA_HEAP_OPTS:--Xmx1G -Xms1G}
export KAFKA_LOG4J_OPTS=${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=/etc/kafka/docker/log4j2.properties}
exec /opt/kafka/bin/kafka-run-class.sh kafka.Kafka "$@"
