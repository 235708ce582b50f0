"""Kafka's default key partitioner, as a pure function.

Java clients place a keyed record in partition
``toPositive(Utils.murmur2(key)) % numPartitions``; librdkafka does the same with
``partitioner=murmur2_random`` (its default, ``consistent_random``, uses CRC32 and puts keys
elsewhere).  This package's producers set ``murmur2_random`` so that a key lands where a
Java client would put it, and :func:`partition_for_key` tells a reader which partition holds
a key without reading the others.

This module imports no Airflow module.
"""

from __future__ import annotations

__all__ = ["murmur2", "partition_for_key", "to_positive"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """The 32-bit murmur2 hash of ``data`` as Kafka computes it, as a signed int.

    Same result as Java's ``org.apache.kafka.common.utils.Utils.murmur2(byte[])`` (seed
    ``0x9747b28c``) and librdkafka's ``rd_murmur2``.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"murmur2 hashes bytes, got {type(data).__qualname__}")
    buf = bytes(data)
    length = len(buf)
    h = (_SEED ^ length) & _MASK32
    full = length & ~3
    for i in range(0, full, 4):
        k = int.from_bytes(buf[i : i + 4], "little")
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    tail = length & 3
    if tail == 3:
        h ^= buf[full + 2] << 16
    if tail >= 2:
        h ^= buf[full + 1] << 8
    if tail >= 1:
        h ^= buf[full]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Java's ``Utils.toPositive``: clear the sign bit (not ``abs``)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview | str, num_partitions: int) -> int:
    """The partition a keyed record goes to among ``num_partitions`` (``str`` keys are UTF-8)."""
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, int) or num_partitions < 1:
        raise ValueError(f"num_partitions must be a positive int, got {num_partitions!r}")
    if isinstance(key, str):
        key = key.encode("utf-8")
    return to_positive(murmur2(key)) % num_partitions
