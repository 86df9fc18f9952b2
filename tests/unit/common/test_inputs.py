"""Damaged input files are errors that name them (stages.common.inputs)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from stages.common.inputs import InputError, check_folder, check_folders, load_npy, read_json
from stages.config import ConfigError, load_params

GARBAGE = b"\x00\xffnot this format\x9c" * 64


def _halve(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_read_json_names_a_truncated_or_garbled_file(tmp_path):
    path = tmp_path / "gate.json"
    path.write_text(json.dumps({"passed": True, "checks": [1, 2, 3]}))
    assert read_json(path) == {"passed": True, "checks": [1, 2, 3]}
    _halve(path)
    with pytest.raises(InputError, match=r"gate\.json: not a valid JSON file \(JSONDecodeError"):
        read_json(path)
    path.write_bytes(GARBAGE)
    with pytest.raises(InputError, match=r"gate\.json: not a valid JSON file \(UnicodeDecodeError"):
        read_json(path)
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "missing.json")


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_load_npy_names_a_damaged_array(tmp_path, damage):
    path = tmp_path / "train.npy"
    np.save(path, np.arange(4096, dtype=np.int32).reshape(32, 128))
    assert load_npy(path).shape == (32, 128)
    _halve(path) if damage == "truncated" else path.write_bytes(GARBAGE)
    with pytest.raises(InputError, match=r"train\.npy: not a valid NumPy array file"):
        load_npy(path)


@pytest.mark.parametrize(("name", "damage"), [("model.safetensors", "truncated"), ("model.safetensors", "garbage"),
                                              ("config.json", "truncated"), ("tokenizer.json", "garbage")])
def test_check_folder_names_the_damaged_file_of_a_saved_model(tmp_path, name, damage):
    from safetensors.torch import save_file

    folder = tmp_path / "bert"
    folder.mkdir()
    save_file({"w": torch.randn(64, 64)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 64}))
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0}}}))
    assert check_folder(folder) == folder
    _halve(folder / name) if damage == "truncated" else (folder / name).write_bytes(GARBAGE)
    with pytest.raises(InputError, match=rf"{name.replace('.', chr(92) + '.')}: not a valid"):
        check_folder(folder)


def test_check_folders_checks_each_saved_folder_and_skips_hidden_ones(tmp_path):
    for name in ("a", "b", ".b.tmp-killed"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    (tmp_path / ".b.tmp-killed" / "config.json").write_text("{")  # a killed run's half-written folder
    check_folders(tmp_path, tmp_path / "absent")
    (tmp_path / "b" / "config.json").write_text("{")
    with pytest.raises(InputError, match=r"b/config\.json"):
        check_folders(tmp_path)
    with pytest.raises(FileNotFoundError):
        check_folder(tmp_path / "absent")


def test_a_params_file_that_is_not_text_names_it(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_bytes(GARBAGE)
    with pytest.raises(ConfigError, match=r"params\.yaml: not UTF-8 text"):
        load_params(path)
