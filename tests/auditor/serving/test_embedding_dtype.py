"""`AUDITOR_EMBEDDING_DTYPE` (MiniLM's precision for domain detection and /v1/embeddings): a value this machine
cannot run stops `auditor serve` in one line before anything starts, as the detector itself loads only after
ready; an unknown one is refused where settings are read."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from knowledge_graphs import minilm_openvino
from tests.auditor.conftest import make_settings
from tests.auditor.serving.serve_refusal import refused_serve


def test_bf16_on_a_cpu_without_it_stops_serve_in_one_line(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setattr(minilm_openvino, "native_bf16", lambda: False)
    err = refused_serve(monkeypatch, tmp_path, capsys, embedding_dtype="bfloat16")
    assert "AUDITOR_EMBEDDING_DTYPE" in err and "natively" in err


def test_an_unknown_dtype_stops_serve_in_one_line_naming_the_variable(monkeypatch, tmp_path: Path, capsys) -> None:
    err = refused_serve(monkeypatch, tmp_path, capsys, embedding_dtype="float16")
    assert "AUDITOR_EMBEDDING_DTYPE: Input should be 'auto', 'float32' or 'bfloat16'" in err


def test_an_unknown_dtype_is_refused_where_settings_are_read() -> None:
    with pytest.raises(ValidationError, match="embedding_dtype"):
        make_settings("sqlite://", embedding_dtype="float16")
    assert make_settings("sqlite://").embedding_dtype == "auto"
