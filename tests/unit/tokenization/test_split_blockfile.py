"""Held-out split by id hash, and block files that memory-map."""

from __future__ import annotations

import numpy as np
import pytest

from stages.config import ConfigError, build
from stages.tokenization.packing import BlockWriter, dtype_for, open_blocks
from stages.tokenization.split import SplitConfig, is_heldout


def test_split_is_stable_and_close_to_the_fraction():
    cfg = SplitConfig(heldout_fraction=0.1)
    ids = [f"doc-{i}" for i in range(20000)]
    held = [i for i in ids if is_heldout(i, cfg)]
    assert 0.09 < len(held) / len(ids) < 0.11
    assert held == [i for i in ids if is_heldout(i, SplitConfig(heldout_fraction=0.1))]
    salted = {i for i in ids if is_heldout(i, SplitConfig(heldout_fraction=0.1, salt="x"))}
    assert salted != set(held) and 0.09 < len(salted) / len(ids) < 0.11


def test_split_config_rejects_bad_fraction():
    with pytest.raises(ConfigError, match="split.heldout_fraction"):
        build(SplitConfig, {"heldout_fraction": 1.0}, "split")


def test_block_writer_roundtrip(tmp_path):
    w = BlockWriter(tmp_path / "b.npy", width=4, dtype=dtype_for(8192))
    w.write(np.arange(8).reshape(2, 4))
    w.write(np.arange(8, 20).reshape(3, 4))
    with pytest.raises(ValueError, match="width 4"):
        w.write(np.zeros((1, 5)))
    w.close()
    arr = open_blocks(tmp_path / "b.npy")
    assert isinstance(arr, np.memmap) and arr.dtype == np.uint16 and arr.shape == (5, 4)
    assert arr.reshape(-1).tolist() == list(range(20))
    assert not (tmp_path / "b.npy.part").exists()
    assert dtype_for(70000) == np.uint32
