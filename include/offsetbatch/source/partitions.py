"""Checks of the partitions a pipeline tracks against the ones Kafka has."""

from __future__ import annotations

from offsetbatch.errors import PartitionVanishedError
from offsetbatch.model import TopicPartition


def check_vanished(name: str, frontier: dict[TopicPartition, int], present: set[TopicPartition]) -> None:
    """Fail, naming them, if partitions the ledger tracks are gone from Kafka."""
    vanished = sorted(tp for tp in frontier if tp not in present)
    if vanished:
        listing = ", ".join(f"{tp} (frontier {frontier[tp]})" for tp in vanished)
        raise PartitionVanishedError(
            f"pipeline {name}: partition(s) {listing} are in the ledger but no longer exist in Kafka. Nothing was "
            f"planned. If the topic was deleted or recreated on purpose, move the frontier with 'offsetbatch reset'."
        )
