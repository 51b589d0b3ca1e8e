"""NVRTC refuses <cub/cub.cuh> (an #error in CCCL); the extraction includes its block/warp headers instead."""

from __future__ import annotations


def test_cub_umbrella_header_becomes_its_device_headers():
    from components.features.static.source import PreparedSource, inline_includes

    prepared = PreparedSource(text="")
    text = inline_includes('#include <cub/cub.cuh>\n#include "cub/cub.cuh"\n', None, (), prepared)
    assert "cub/cub.cuh" not in text
    assert text.count("#include <cub/block/block_reduce.cuh>") == 2
    assert prepared.dropped_includes == [] and prepared.missing_includes == []
