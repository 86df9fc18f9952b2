"""A fine-tuned folder's tokenizer files do not depend on how the process loaded the tokenizer."""

from __future__ import annotations

import json

import pytest

from stages.finetuning.core import save_tokenizer


@pytest.mark.parametrize("paradigm", ["bert", "gpt", "t5"])
def test_the_saved_tokenizer_is_the_same_online_and_offline(models, tmp_path, paradigm):
    from transformers import AutoTokenizer

    saved = {}
    for offline in (False, True):  # HF_HUB_OFFLINE=1 makes transformers load with local_files_only=True
        tok = AutoTokenizer.from_pretrained(str(models.models[paradigm]), local_files_only=offline)
        save_tokenizer(tok, tmp_path / str(offline))
        saved[offline] = {p.name: p.read_bytes() for p in (tmp_path / str(offline)).iterdir()}
    assert saved[False] == saved[True]
    config = json.loads(saved[True]["tokenizer_config.json"])
    assert config.get("local_files_only", False) is False
