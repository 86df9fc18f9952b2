"""Intrinsic scores of a pre-trained model on a corpus's held-out blocks with its own objective; masks and spans are
fixed per block, so a paradigm's general and DAPT models are scored on the same inputs."""

from __future__ import annotations

from pathlib import Path

from stages.common.inputs import load_npy, read_json
from stages.objectives import for_paradigm
from stages.tokenization.layout import BlockLayout
from stages.training.config import TrainConfig


def read_layout(tokens_dir: Path):
    manifest = tokens_dir / "manifest.json"
    if not manifest.is_file():
        raise FileNotFoundError(f"{manifest}: no token dataset (run the tokens stage first)")
    return BlockLayout(**read_json(manifest)["layout"])


def score(model, layout, tokens_dir: Path, corpus: str, *, eval_blocks: int, micro_batch: int) -> dict:
    """``model`` (loaded once by the caller) on the held-out blocks of ``corpus``, on the GPU under bf16
    autocast when there is one (the model is moved there), else on the CPU in fp32."""
    import torch

    from stages.training.loop import evaluate, native_bf16

    path = tokens_dir / corpus / "heldout.npy"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no held-out blocks for corpus {corpus!r}")
    blocks = load_npy(path)
    cfg = TrainConfig(eval_blocks=eval_blocks, micro_batch=micro_batch, seed=0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    result = evaluate(model, for_paradigm(layout), blocks, cfg, device, device == "cuda" and native_bf16(device))
    result["blocks"] = int(min(eval_blocks, len(blocks)))
    return result
