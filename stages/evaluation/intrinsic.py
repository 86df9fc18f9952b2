"""Intrinsic scores of a pre-trained model on held-out token blocks of a corpus, with its own objective:
perplexity (GPT), masked-token accuracy (BERT), span loss and target-token accuracy (T5). The masks and
spans are fixed per block (the training loop's evaluation), so the general and the DAPT model of a paradigm
are scored on exactly the same inputs, before and after domain adaptation."""

from __future__ import annotations

import json
from pathlib import Path


def read_layout(tokens_dir: Path):
    from stages.tokenization.layout import BlockLayout

    manifest = tokens_dir / "manifest.json"
    if not manifest.is_file():
        raise FileNotFoundError(f"{manifest}: no token dataset (run the tokens stage first)")
    return BlockLayout(**json.loads(manifest.read_text(encoding="utf-8"))["layout"])


def score(model, layout, tokens_dir: Path, corpus: str, *, eval_blocks: int, micro_batch: int, seed: int = 0) -> dict:
    """``model`` (loaded once by the caller) on the held-out blocks of ``corpus``."""
    import numpy as np

    from stages.objectives import for_paradigm
    from stages.training.config import TrainConfig
    from stages.training.loop import evaluate

    path = tokens_dir / corpus / "heldout.npy"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no held-out blocks for corpus {corpus!r}")
    blocks = np.load(path, mmap_mode="r")
    cfg = TrainConfig(eval_blocks=eval_blocks, micro_batch=micro_batch, seed=seed)
    result = evaluate(model, for_paradigm(layout), blocks, cfg, "cpu", False)
    result["blocks"] = int(min(eval_blocks, len(blocks)))
    return result
