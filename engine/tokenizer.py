"""Tokenizer: `tokenizers` for text <-> ids, jinja2 for the chat template (rendered as Hugging Face does)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer as BackendTokenizer

from engine.errors import ModelLoadError
from engine.sampling_params import InvalidRequestError


class ChatTemplateError(InvalidRequestError):
    """The chat template is missing or raised while rendering these messages."""


def _token_content(value: Any) -> str | None:
    # tokenizer_config.json writes special tokens either as strings or as AddedToken dicts
    if isinstance(value, dict):
        return value.get("content")
    return value


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(f"chat template: {message}")


def _compile_template(source: str) -> jinja2.Template:
    # the same environment settings as transformers' chat-template renderer
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False, sort_keys=False: json.dumps(
        x, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys
    )
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


class Tokenizer:
    def __init__(self, backend: BackendTokenizer, config: dict[str, Any], eos_token_ids: Sequence[int]) -> None:
        self.backend = backend
        self.bos_token: str | None = _token_content(config.get("bos_token"))
        self.eos_token: str | None = _token_content(config.get("eos_token"))
        self.add_bos_token: bool = bool(config.get("add_bos_token", False))
        ids = list(eos_token_ids)
        if self.eos_token is not None:
            eos_id = backend.token_to_id(self.eos_token)
            if eos_id is not None and eos_id not in ids:
                ids.append(eos_id)
        self.eos_token_ids: list[int] = ids
        self.bos_token_id: int | None = backend.token_to_id(self.bos_token) if self.bos_token else None
        template = config.get("chat_template")
        if isinstance(template, list):  # named templates: use "default"
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        self.chat_template: str | None = template
        self._compiled: jinja2.Template | None = _compile_template(template) if template else None

    @classmethod
    def from_dir(cls, path: Path, eos_token_ids: Sequence[int] = ()) -> Tokenizer:
        tok_file = path / "tokenizer.json"
        if not tok_file.is_file():
            raise ModelLoadError(f"missing tokenizer file: {tok_file}")
        try:
            backend = BackendTokenizer.from_file(str(tok_file))
        except Exception as exc:  # noqa: BLE001 - tokenizers raises bare Exceptions
            raise ModelLoadError(f"corrupt tokenizer file {tok_file}: {exc}") from exc
        config: dict[str, Any] = {}
        config_file = path / "tokenizer_config.json"
        if config_file.is_file():
            try:
                config = json.loads(config_file.read_text())
            except json.JSONDecodeError as exc:
                raise ModelLoadError(f"corrupt tokenizer config {config_file}: {exc}") from exc
        return cls(backend, config, eos_token_ids)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Text -> ids. Text that already starts with the BOS token (a rendered chat template) gets no second one."""
        if add_special_tokens and self.bos_token and text.startswith(self.bos_token):
            add_special_tokens = False
        ids = self.backend.encode(text, add_special_tokens=add_special_tokens).ids
        # tokenizer.json may lack a BOS post-processor while tokenizer_config asks for one
        if add_special_tokens and self.add_bos_token and self.bos_token_id is not None and (
            not ids or ids[0] != self.bos_token_id
        ):
            ids = [self.bos_token_id, *ids]
        return ids

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id: int) -> str:
        """One token's text as it would print (for logprob entries)."""
        return self.backend.decode([token_id], skip_special_tokens=False)

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, tokenize: bool = False,
        **kwargs: Any,
    ) -> str | list[int]:
        """Render messages with the checkpoint's chat template; `tokenize=True` returns ids."""
        if self._compiled is None:
            raise ChatTemplateError("this checkpoint has no chat_template in tokenizer_config.json")
        try:
            text = self._compiled.render(
                messages=messages, add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token or "", eos_token=self.eos_token or "", **kwargs,
            )
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(f"chat template failed: {exc}") from exc
        # the template already wrote BOS where it wants one
        return self.encode(text, add_special_tokens=False) if tokenize else text
