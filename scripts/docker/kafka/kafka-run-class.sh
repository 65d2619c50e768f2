#!/bin/bash
# kafka-run-class.sh CLASS [ARG...]: what the Kafka distribution's script of that name does, for the
# jars in /opt/kafka/libs. The *_OPTS variables are split into words on purpose (as upstream).
# Tools log WARN and above to stderr unless KAFKA_LOG4J_OPTS says otherwise.
exec java ${KAFKA_HEAP_OPTS:--Xmx256M} \
  ${KAFKA_JVM_PERFORMANCE_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true} \
  ${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=/etc/kafka/docker/tools-log4j2.properties} \
  ${KAFKA_JMX_OPTS-} ${KAFKA_GC_LOG_OPTS-} ${KAFKA_OPTS-} \
  -cp '/opt/kafka/libs/*' "$@"
