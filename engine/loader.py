"""Reading a Hugging Face checkpoint folder: config, safetensors weights (single or sharded), hash."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import safe_open

from engine.checkpoint import generation_eos_ids, read_json
from engine.config import ModelLoadError, load_model_config

__all__ = ["checkpoint_hash", "generation_eos_ids", "iter_weights", "load_model_config", "read_json", "weight_files"]

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


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
