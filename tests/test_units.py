"""The one byte formatter: binary units, exact where the size is a whole number of them."""

import pytest

from commprof.units import format_bytes


@pytest.mark.parametrize(
    "count, text",
    [
        (0, "0 B"),
        (512, "512 B"),
        (1023, "1023 B"),
        (14336, "14 KiB"),  # a [1, 7168] bf16 all-reduce
        (327680, "320 KiB"),
        (1310720, "1.25 MiB"),
        (123456, "120.56 KiB"),
        (3 << 30, "3 GiB"),
        (5 << 40, "5 TiB"),
        (1 << 50, "1024 TiB"),
    ],
)
def test_format_bytes(count, text):
    assert format_bytes(count) == text
