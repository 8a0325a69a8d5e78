"""The small files of a Hugging Face checkpoint folder (JSON configs, the tokenizer), read without torch: an API
process that talks to an engine core tokenises prompts and detokenises outputs, and needs no more than this."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import ModelLoadError
from engine.tokenizer import Tokenizer

if TYPE_CHECKING:
    from engine.config import ModelConfig


def read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ModelLoadError(f"missing checkpoint file: {path}")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"corrupt checkpoint file {path}: {exc}") from exc


def token_ids(value: Any) -> list[int]:
    """An `eos_token_id` field as a list: absent, one id, or several."""
    return [] if value is None else ([value] if isinstance(value, int) else list(value))


def generation_eos_ids(path: Path) -> list[int]:
    """eos_token_id from generation_config.json (may list several, e.g. Llama 3's <|eot_id|>)."""
    file = path / "generation_config.json"
    return token_ids(read_json(file).get("eos_token_id")) if file.is_file() else []


def load_tokenizer(path: str | Path, model_config: ModelConfig | None = None) -> Tokenizer:
    """The checkpoint's tokenizer with every EOS id the checkpoint names (generation_config and config)."""
    path = Path(path)
    config_eos = (model_config.eos_token_ids if model_config is not None
                  else token_ids(read_json(path / "config.json").get("eos_token_id")))
    return Tokenizer.from_dir(path, list(dict.fromkeys(generation_eos_ids(path) + config_eos)))
