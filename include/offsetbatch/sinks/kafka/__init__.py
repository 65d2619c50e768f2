"""The ``kafka`` sink: each batch's records published to a Kafka topic in **one Kafka
transaction**, with a marker in the same transaction (docs/architecture.md, *The Kafka sink*).

Spark's own Kafka sink is at-least-once; here the job only serializes (key, JSON value) in Spark
and stages them, and the commit task publishes, after the ledger transaction (the order of every
publish-after sink; rolled forward after a crash):

1. a transactional producer with ``transactional.id = offsetbatch.<pipeline>.<topic>``;
   ``init_transactions`` fences any older producer of the pipeline (a zombie task) and aborts the
   transaction a killed one left open;
2. the marker: the committed offset of group ``offsetbatch.<pipeline>.published`` on the output
   topic's partition 0 is the id of the last batch a committed transaction published (its
   metadata: output id, attempt, record count). If it names this batch, the batch is in: nothing is
   sent again;
3. otherwise: ``begin_transaction``, the records in source (topic, partition, offset) order, the
   rejected ones to the dead-letter topic if set, ``send_offsets_to_transaction`` (the marker),
   ``commit_transaction``: records and marker become visible to ``read_committed`` consumers
   together, or not at all;
4. the ledger marks the batch published (a crash before it: step 2 of the rerun finds the marker).

Publishes are serialized by the pipeline lock and each is marked in the ledger before the next, so
"the last marker" is enough. A replay or rewind would append records again (a topic is
append-only): refused when planning unless ``republish: true``; republished records carry the header
``offsetbatch.republish-of``.
"""

from offsetbatch.sinks.kafka.settings import KafkaSinkSettings
from offsetbatch.sinks.kafka.sink import KafkaSink

__all__ = ["KafkaSink", "KafkaSinkSettings"]
