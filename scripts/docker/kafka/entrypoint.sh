#!/bin/bash
# The image's default command (/etc/kafka/docker/run), as apache/kafka's for the environment
# docker-compose.yaml sets: KAFKA_* variables -> /opt/kafka/config/server.properties, the SSL file
# helpers, storage formatted once with CLUSTER_ID, then the broker exec'd in the foreground.
# Values are never printed (JAAS configs and store passwords are among them); only keys are.
set -euo pipefail

config=/opt/kafka/config/server.properties
secrets=/etc/kafka/secrets
# Not broker settings: the JVM's options (read by kafka-run-class.sh) and the SSL file helpers below.
excluded=" KAFKA_OPTS KAFKA_HEAP_OPTS KAFKA_JVM_PERFORMANCE_OPTS KAFKA_LOG4J_OPTS KAFKA_JMX_OPTS
  KAFKA_GC_LOG_OPTS KAFKA_VERSION KAFKA_JMX_HOSTNAME KAFKA_JMX_PORT KAFKA_LOG4J_LOGGERS
  KAFKA_LOG4J_ROOT_LOGLEVEL KAFKA_TOOLS_LOG4J_LOGLEVEL KAFKA_SSL_KEYSTORE_FILENAME
  KAFKA_SSL_TRUSTSTORE_FILENAME KAFKA_SSL_KEYSTORE_CREDENTIALS KAFKA_SSL_KEY_CREDENTIALS
  KAFKA_SSL_TRUSTSTORE_CREDENTIALS "
excluded=${excluded//$'\n'/ }

die() { echo "ERROR: $*" >&2; exit 1; }

declare -A props
for name in $(compgen -e); do
  [[ $name == KAFKA_* && $excluded != *" $name "* ]] || continue
  # KAFKA_LISTENER_NAME_SASL__SSL_SCRAM___SHA___512_SASL_JAAS_CONFIG
  #   -> listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config
  key=${name#KAFKA_}
  key=${key,,}
  key=${key//_/.}
  key=${key//.../-}
  key=${key//../_}
  props[$key]=${!name}
done

# The SSL helpers, as upstream's: a file name in /etc/kafka/secrets becomes a location; a file there
# holding a password becomes the password (its trailing newlines dropped, as upstream's $(cat ...)).
for helper in SSL_KEYSTORE_FILENAME:ssl.keystore.location:path \
    SSL_TRUSTSTORE_FILENAME:ssl.truststore.location:path \
    SSL_KEYSTORE_CREDENTIALS:ssl.keystore.password:content \
    SSL_KEY_CREDENTIALS:ssl.key.password:content \
    SSL_TRUSTSTORE_CREDENTIALS:ssl.truststore.password:content; do
  IFS=: read -r name key kind <<<"$helper"
  name=KAFKA_$name
  [[ -n ${!name-} ]] || continue
  file=$secrets/${!name}
  [[ -f $file ]] || die "$file not found (named by $name)"
  if [[ $kind == path ]]; then props[$key]=$file; else props[$key]=$(<"$file"); fi
done

[[ -n ${props[process.roles]-} ]] || die "KAFKA_PROCESS_ROLES is not set (this image runs KRaft nodes only)"
[[ -n ${CLUSTER_ID-} ]] || die "CLUSTER_ID is not set (make one with: kafka-storage.sh random-uuid)"

# Written owner-only (passwords), sorted, one key=value a line. Java's properties format reads a
# backslash as an escape, a newline as the value's end, and drops leading blanks: all three are
# escaped, so every value (JAAS configs: spaces, quotes, '=', ';') reaches the broker unchanged.
(
  umask 077
  for key in $(printf '%s\n' "${!props[@]}" | sort); do
    value=${props[$key]//\\/\\\\}
    value=${value//$'\n'/\\n}
    [[ $value == [[:space:]]* ]] && value=\\$value  # else Java would drop a leading blank
    printf '%s=%s\n' "$key" "$value"
  done > "$config"
)
echo "===> $config: $(printf '%s\n' "${!props[@]}" | sort | tr '\n' ' ')"

# First start: format the log dirs with the cluster id (a static controller.quorum.voters needs no
# --initial-controllers); later starts find them formatted and leave them as they are.
/opt/kafka/bin/kafka-storage.sh format --cluster-id "$CLUSTER_ID" -c "$config" --ignore-formatted

echo "===> Launching kafka.Kafka as $(id -un) ($(id -u))"
exec /opt/kafka/bin/kafka-server-start.sh "$config"
