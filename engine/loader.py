"""Reading a Hugging Face checkpoint folder: config, safetensors weights (single or sharded), hash."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from engine.config import ModelConfig, ModelLoadError

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ModelLoadError(f"missing checkpoint file: {path}")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"corrupt checkpoint file {path}: {exc}") from exc


def load_model_config(path: Path) -> ModelConfig:
    try:
        return ModelConfig.from_hf_dict(read_json(path / "config.json"))
    except KeyError as exc:
        raise ModelLoadError(f"{path / 'config.json'} lacks required field {exc.args[0]!r}") from exc


def generation_eos_ids(path: Path) -> list[int]:
    """eos_token_id from generation_config.json (may list several, e.g. Llama 3's <|eot_id|>)."""
    file = path / "generation_config.json"
    if not file.is_file():
        return []
    eos = read_json(file).get("eos_token_id")
    return [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))


def weight_files(path: Path) -> list[Path]:
    """The safetensors files of a checkpoint, in a stable order."""
    index = path / INDEX_FILE
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ModelLoadError(f"corrupt checkpoint file {index}: no weight_map")
        files = [path / name for name in sorted(set(weight_map.values()))]
    else:
        files = [path / SINGLE_FILE]
    for file in files:
        if not file.is_file():
            raise ModelLoadError(f"missing weight file: {file}")
    return files


def iter_weights(files: list[Path]) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for every tensor; a corrupt file raises ModelLoadError naming it."""
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as handle:
                for name in handle.keys():  # noqa: SIM118 - safe_open is not a mapping
                    yield name, handle.get_tensor(name)
        except ModelLoadError:
            raise
        except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
            raise ModelLoadError(f"corrupt weight file {file}: {exc}") from exc


def checkpoint_hash(path: Path, files: list[Path]) -> str:
    """sha256 over config.json and every weight file (names and bytes), hex."""
    digest = hashlib.sha256()
    for file in [path / "config.json", *files]:
        digest.update(file.name.encode())
        with file.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()
