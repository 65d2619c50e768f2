"""Whether each staged record fits the topic it is published to, known before the ledger commit.

Two limits refuse a record, and both only after the ledger transaction, when the batch can no
longer be left planned: librdkafka refuses a message whose key, value and headers (plus the
record's framing) exceed the producer's ``message.max.bytes`` (``MSG_SIZE_TOO_LARGE``, locally),
and the broker refuses a record batch larger than the topic's ``max.message.bytes`` after
compression. A record that fails either would be retried forever and stall every later batch
(issue 41, case 10), so the commit measures the staged records first, on Arrow columns: the sizes
in C, and a compression (the producer's codec, in pyarrow) only for the few records whose
uncompressed size is over the topic's limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

# A v2 record batch's header (61 bytes) and one record's framing (length, attributes, timestamp
# and offset deltas, key, value and header counts as varints: at most 35 bytes), rounded up.
BATCH_OVERHEAD = 128
# Per header: its name's and value's lengths as varints (at most 5 bytes each).
HEADER_FRAMING = 10
# librdkafka's ``compression.type`` -> pyarrow's codec of the same format (``none``: no codec)
CODECS = {"gzip": "gzip", "snappy": "snappy", "lz4": "lz4_frame", "zstd": "zstd"}


@dataclass(frozen=True)
class Limits:
    """The largest record ``topic`` takes from this producer."""

    topic: str
    topic_max: int  # the topic's max.message.bytes (the broker's, after compression); 0: unknown
    producer_max: int  # the producer's message.max.bytes (librdkafka's, before compression)
    compression: str  # the producer's compression.type


@dataclass(frozen=True)
class Oversize:
    """The first record (in the rows' order) that ``limits`` refuse, and why."""

    row: int
    size: int  # key, value and headers, uncompressed
    compressed: int | None  # with the producer's codec, when the topic's limit was the question
    limit: int
    setting: str  # what refuses it: "topic <name> max.message.bytes" or "sink.producer max.request.size"


def record_sizes(columns: "list[pa.ChunkedArray]", header_bytes: int) -> "pa.ChunkedArray":
    """Each row's size as librdkafka counts it: the byte lengths of ``columns`` (key and value; a
    null counts 0) plus ``header_bytes``, the same for every row (names, values and framing)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    total = pa.scalar(header_bytes, pa.int64())
    for column in columns:
        lengths = pc.binary_length(pc.cast(column, pa.binary()) if not pa.types.is_binary(column.type) else column)
        total = pc.add(total, pc.fill_null(pc.cast(lengths, pa.int64()), 0))
    return total


def compressed_size(parts: list[bytes | None], compression: str) -> int:
    """The bytes ``parts`` take compressed with ``compression`` (an estimate with pyarrow's codec of
    the same format: the two libraries' framing differs by a few bytes)."""
    import pyarrow as pa

    raw = b"".join(p for p in parts if p)
    codec = CODECS.get(compression)
    return len(raw) if codec is None else len(pa.compress(raw, codec=codec, asbytes=True))


def _row_bytes(columns: "list[pa.ChunkedArray]", row: int) -> list[bytes | None]:
    values = [c[row].as_py() for c in columns]
    return [v.encode() if isinstance(v, str) else v for v in values]


def first_oversize(columns: "list[pa.ChunkedArray]", header_bytes: int, limits: Limits) -> Oversize | None:
    """The first row (in the columns' order) whose record the producer or the topic would refuse,
    or ``None``. ``limits.topic_max`` 0: the topic's limit is unknown, only the producer's is checked."""
    import pyarrow.compute as pc

    if not columns or len(columns[0]) == 0:
        return None
    framed = pc.add(record_sizes(columns, header_bytes), BATCH_OVERHEAD)
    over = pc.greater(framed, limits.producer_max)
    if limits.topic_max:
        over = pc.or_(over, pc.greater(framed, limits.topic_max))
    for row in pc.indices_nonzero(over).to_pylist():
        size = framed[row].as_py() - BATCH_OVERHEAD
        if size + BATCH_OVERHEAD > limits.producer_max:
            return Oversize(row, size, None, limits.producer_max,
                            "sink.producer max.request.size (librdkafka's message.max.bytes)")
        compressed = compressed_size(_row_bytes(columns, row), limits.compression) + header_bytes
        if compressed + BATCH_OVERHEAD > limits.topic_max:
            return Oversize(row, size, compressed, limits.topic_max, f"topic {limits.topic}'s max.message.bytes")
    return None
