"""Which staged records the Kafka sink's commit refuses before the ledger transaction: the sizes
librdkafka and the broker would refuse (``sinks.kafka.record_size``), on Arrow columns."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from offsetbatch.sinks.kafka.record_size import BATCH_OVERHEAD, Limits, first_oversize, record_sizes

TOPIC_MAX = 1_048_588  # Kafka's default max.message.bytes
PRODUCER_MAX = 4_194_304  # the sink's default max.request.size
INCOMPRESSIBLE = os.urandom(1_500_000)


def _limits(topic_max: int = TOPIC_MAX, compression: str = "zstd", producer_max: int = PRODUCER_MAX) -> Limits:
    return Limits("out", topic_max, producer_max, compression)


def test_sizes_count_key_value_and_headers_and_a_null_as_nothing():
    keys = pa.chunked_array([[None, "kk", "ü"]])
    values = pa.chunked_array([[b"v", None, b"vvv"]])
    assert record_sizes([keys, values], 100).to_pylist() == [101, 102, 105]  # "ü" is 2 bytes of UTF-8


def test_a_record_over_the_topics_limit_after_compression_is_named_with_both_sizes():
    values = pa.chunked_array([[b"small", INCOMPRESSIBLE, INCOMPRESSIBLE]])
    over = first_oversize([pa.chunked_array([[None, None, None]]), values], 200, _limits())
    assert over is not None
    assert (over.row, over.size, over.limit) == (1, 1_500_200, TOPIC_MAX)  # the first of the two
    assert over.compressed > TOPIC_MAX and "topic out's max.message.bytes" in over.setting


def test_a_large_record_that_compresses_under_the_limit_passes_unless_the_producer_compresses_nothing():
    values = pa.chunked_array([[b"a" * 3_000_000]])
    assert first_oversize([values], 200, _limits(compression="zstd")) is None
    over = first_oversize([values], 200, _limits(compression="none"))
    assert over is not None and over.compressed == 3_000_200


def test_the_producers_limit_is_on_the_uncompressed_record():
    values = pa.chunked_array([[b"a" * 3_000_000]])
    over = first_oversize([values], 200, _limits(topic_max=16_000_000, producer_max=2_000_000))
    assert over is not None and over.compressed is None and over.limit == 2_000_000
    assert "max.request.size" in over.setting


@pytest.mark.parametrize("topic_max", [0, 16_000_000])
def test_a_topic_whose_limit_is_unknown_or_larger_takes_it(topic_max):
    values = pa.chunked_array([[INCOMPRESSIBLE]])
    assert first_oversize([values], 200, _limits(topic_max=topic_max)) is None


def test_the_limit_is_inclusive_of_the_record_batch_framing():
    fits = TOPIC_MAX - BATCH_OVERHEAD - 200
    values = pa.chunked_array([[os.urandom(fits), os.urandom(fits + 1)]])
    over = first_oversize([values], 200, _limits(compression="none"))
    assert over is not None and over.row == 1


def test_no_rows_no_refusal():
    assert first_oversize([pa.chunked_array([], pa.binary())], 200, _limits()) is None
