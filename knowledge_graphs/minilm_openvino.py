"""The bundled MiniLM's forward pass run by OpenVINO, in bfloat16 on CPUs that compute it natively.

Why: the API process embeds every request's prompt and answer sentences for domain detection, and those
forwards were a third of its CPU under load. On a CPU with bf16 matrix units (AMX, AVX512-BF16) OpenVINO runs
the matrix products in bf16 with fp32 accumulation: 1.3-1.9x less CPU a sentence than ONNX Runtime's fp32 on the
same graph at one thread, alone to in eights (`python -m benchmarks.audit_cpu --only embeddings`), with vectors
within a cosine of 1e-4 of fp32's and the same domain decisions on the evaluation sets but for texts scored at
the threshold (`tests/knowledge_graphs/test_detection_precision.py`). ONNX Runtime has
no bf16 matrix kernels on x86, and torch would bring its whole stack into the API process.

The graph is the one `knowledge_graphs.minilm_onnx` writes from the weights already read, so there is no
exported file to ship and the vectors follow the same definition. A CPU without native bf16 keeps ONNX
Runtime's fp32 (`knowledge_graphs.minilm.MiniLMEncoder` chooses).
"""

from __future__ import annotations

import tempfile
import threading
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from knowledge_graphs.inference_runtimes import import_openvino
from knowledge_graphs.minilm_onnx import build_model

if TYPE_CHECKING:
    from knowledge_graphs.minilm import MiniLMEncoder

PRECISIONS = {"bfloat16": "bf16", "float32": "f32"}
# Inputs are padded to a multiple of this many tokens (padding is masked, so the vectors stay the same). OpenVINO
# prepares kernels per input shape (its oneDNN JIT-compiles each matrix product's), so a shape first seen is slow
# and each kept one costs memory: over 3,000 forwards of the evaluation sets' sentences in groups of 1-8, padded
# to 16 the process grew 5 MB where unpadded it grew 80 (a fill that took ~2,500 forwards, minutes of a soak),
# in the same CPU within this host's noise (30-53 s against 39-53; ONNX Runtime fp32: 84-88).
LENGTH_BUCKET = 16
# Input shapes whose prepared kernels OpenVINO keeps (least recently used dropped). Its default, 5,000, is memory
# without a bound in practice: RSS grew 950 MB over 960 unpadded batch x length shapes (up to 16 x 124 tokens).
SHAPE_CACHE = 64
# What `warm_up` prepares: the shapes most forwards have (1-8 sentences of up to 64 tokens). Over 3,000 forwards
# that followed it the process grew 1.7 MB, against 12 from a cold start; it costs ~1 CPU s and 13 MB at load.
WARM_SHAPES = tuple((rows, LENGTH_BUCKET * buckets) for buckets in range(1, 5) for rows in range(1, 9))


def bucketed_length(length: int) -> int:
    """`length` rounded up to a multiple of LENGTH_BUCKET (inputs are at most MAX_SEQ_LENGTH, itself a multiple)."""
    return -(-length // LENGTH_BUCKET) * LENGTH_BUCKET


# The x86 features OpenVINO's CPU plugin computes bf16 with (AVX512-BF16, AMX, or AVX2 with AVX-NE-CONVERT), as
# Linux names them in /proc/cpuinfo. Where none is listed OpenVINO cannot list BF16 either, and is not loaded
# only to say so: that costs each asking process (the API, every worker) 24 MB of its own memory and 0.25 s.
BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "avx_ne_convert"})


@cache
def native_bf16() -> bool:
    """Whether OpenVINO computes bf16 natively on this CPU (it lists BF16 among the CPU's capabilities)."""
    flags = cpu_flags()
    if flags is not None and not flags & BF16_CPU_FLAGS:
        return False
    return "BF16" in import_openvino().Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str] | None:
    """The x86 feature flags Linux lists for this CPU; None where there are none to read (another OS or
    architecture: OpenVINO is asked instead)."""
    try:
        with cpuinfo.open() as lines:
            for line in lines:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return None


class OpenVinoForward:
    """`(token_ids [B, L] int64, mask [B, L] float32) -> vectors [B, dimension]` on one OpenVINO thread, in
    `dtype` ("bfloat16" or "float32"). Thread-safe: each calling thread has its own infer request, and the
    runtime releases the GIL while it computes."""

    def __init__(self, encoder: MiniLMEncoder, *, dtype: str) -> None:
        openvino = import_openvino()
        core = openvino.Core()
        config = {
            # one thread, never pinned: the engine core owns the other cores, and a pinned API thread would stay
            # on one CPU whatever the scheduler (or AUDITOR_ENGINE_CPUS) wants
            "INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1, "ENABLE_CPU_PINNING": False,
            "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": PRECISIONS[dtype],
            "CPU_RUNTIME_CACHE_CAPACITY": SHAPE_CACHE,
        }
        with tempfile.TemporaryDirectory(prefix="minilm-openvino-") as folder:
            path = Path(folder) / "minilm.onnx"
            path.write_bytes(build_model(encoder))
            self._compiled = core.compile_model(core.read_model(str(path)), "CPU", config)
        self.dtype = dtype
        self._positions = np.arange(encoder.position.shape[0], dtype=np.int64)
        self._local = threading.local()

    def warm_up(self) -> None:
        """Prepare the kernels of WARM_SHAPES now (where the caller loads the model), not inside requests."""
        for rows, length in WARM_SHAPES:
            self(np.zeros((rows, length), dtype=np.int64), np.ones((rows, length), dtype=np.float32))

    def __call__(self, token_ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self._compiled.create_infer_request()
        padding = bucketed_length(token_ids.shape[1]) - token_ids.shape[1]
        if padding:   # [PAD] ids (0) under a zero mask: attended by nothing, pooled into nothing
            token_ids = np.pad(token_ids, ((0, 0), (0, padding)))
            mask = np.pad(mask, ((0, 0), (0, padding)))
        feeds = {"ids": token_ids, "positions": self._positions[: token_ids.shape[1]], "mask": mask}
        request.infer(feeds)
        return request.get_tensor("vectors").data.copy()   # the request reuses its output buffer
