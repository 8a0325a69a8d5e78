"""The bundled MiniLM's forward pass as an ONNX graph, run by ONNX Runtime.

Why: the API process embeds every no-domain request's sentences, and those forwards are most of its CPU. ONNX
Runtime runs the same fp32 arithmetic 1.8-2.2x faster than numpy's BLAS calls here (4.3 against 9.4 CPU ms for a
sentence alone, 3.2 against 5.9 in eights: fused layer norms, GELU and softmax, prepacked weights;
`python -m benchmarks.audit_cpu`), and gives the same vectors (within 2e-7).
The graph is written from the weights `MiniLMEncoder` has already read, so there is no exported file to ship or
keep in step with the model, and the API process still imports neither torch nor transformers.

The graph mirrors `MiniLMEncoder._forward_numpy`: embeddings and their layer norm, six BERT layers (fused QKV
projection, scaled dot-product attention with padding masked by a large negative score, exact GELU),
mean pooling over the real tokens, unit length. Inputs: `ids` int64 [B, L], `positions` int64 [L] (0..L-1),
`mask` float32 [B, L]; output `vectors` float32 [B, dimension].
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from knowledge_graphs.inference_runtimes import import_onnxruntime
from knowledge_graphs.minilm import MASKED_SCORE

if TYPE_CHECKING:
    from knowledge_graphs.minilm import MiniLMEncoder

OPSET = 18   # LayerNormalization is a standard op from 17; Split takes its sizes as an input from 13


class _GraphBuilder:
    def __init__(self) -> None:
        from onnx import numpy_helper  # noqa: PLC0415 - only where the ONNX backend is used

        self._from_array = numpy_helper.from_array
        self.initializers: list[Any] = []
        self.nodes: list[Any] = []

    def constant(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(self._from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], outputs: list[str] | None = None, **attributes: Any) -> Any:
        from onnx import helper  # noqa: PLC0415

        outputs = outputs or [f"{op_type.lower()}_{len(self.nodes)}"]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, **attributes))
        return outputs[0] if len(outputs) == 1 else outputs


def build_model(encoder: MiniLMEncoder) -> bytes:
    """The serialized ONNX model of `encoder`'s forward pass (weights included)."""
    from onnx import TensorProto, helper  # noqa: PLC0415

    dimension, heads = encoder.dimension, encoder.heads
    head_dim = dimension // heads
    g = _GraphBuilder()
    f32 = np.float32
    split_heads = g.constant("split_heads", np.array([0, 0, heads, head_dim], dtype=np.int64))
    merge_heads = g.constant("merge_heads", np.array([0, 0, dimension], dtype=np.int64))
    qkv_sizes = g.constant("qkv_sizes", np.array([dimension] * 3, dtype=np.int64))
    one, half = g.constant("one", np.array(1.0, f32)), g.constant("half", np.array(0.5, f32))
    inv_sqrt2 = g.constant("inv_sqrt2", np.array(1 / math.sqrt(2), f32))
    scale = g.constant("scale", np.array(1 / math.sqrt(head_dim), f32))
    masked = g.constant("masked_score", np.array(MASKED_SCORE, f32))
    axis_tokens, axis_last = g.constant("axis_tokens", np.array([1], np.int64)), g.constant("axis_last", np.array([-1], np.int64))
    axes_heads_query = g.constant("axes_heads_query", np.array([1, 2], np.int64))

    def layer_norm(x: str, weight_bias: tuple[np.ndarray, np.ndarray], name: str) -> str:
        return g.op("LayerNormalization", [x, g.constant(name + ".weight", weight_bias[0]),
                                           g.constant(name + ".bias", weight_bias[1])], axis=-1, epsilon=encoder.eps)

    def dense(x: str, weight: np.ndarray, bias: np.ndarray, name: str) -> str:
        return g.op("Add", [g.op("MatMul", [x, g.constant(name + ".weight", weight)]), g.constant(name + ".bias", bias)])

    def by_head(x: str, perm: list[int]) -> str:   # [B, L, D] -> [B, H, L, dh] (or [B, H, dh, L] for keys)
        return g.op("Transpose", [g.op("Reshape", [x, split_heads])], perm=perm)

    embedded = g.op("Add", [g.op("Gather", [g.constant("word", encoder.word), "ids"]),
                            g.op("Gather", [g.constant("position", encoder.position), "positions"])])
    x = layer_norm(g.op("Add", [embedded, g.constant("token_type", encoder.token_type)]), encoder.embedding_norm,
                   "embeddings.norm")
    # padding is never attended to: its scores at MASKED_SCORE (finite in every precision), whose exp is 0
    attention_bias = g.op("Unsqueeze", [g.op("Mul", [g.op("Sub", [one, "mask"]), masked]), axes_heads_query])
    for index, (qkv, qkv_bias, out_w, out_b, attention_norm, up_w, up_b, down_w, down_b, output_norm) in enumerate(
            encoder.layers):
        name = f"layer{index}"
        q, k, v = g.op("Split", [dense(x, qkv, qkv_bias, name + ".qkv"), qkv_sizes],
                       [name + ".q", name + ".k", name + ".v"], axis=-1)
        scores = g.op("MatMul", [by_head(g.op("Mul", [q, scale]), [0, 2, 1, 3]), by_head(k, [0, 2, 3, 1])])
        probs = g.op("Softmax", [g.op("Add", [scores, attention_bias])], axis=-1)
        context = g.op("Reshape", [g.op("Transpose", [g.op("MatMul", [probs, by_head(v, [0, 2, 1, 3])])],
                                        perm=[0, 2, 1, 3]), merge_heads])
        x = layer_norm(g.op("Add", [dense(context, out_w, out_b, name + ".out"), x]), attention_norm,
                       name + ".attention_norm")
        up = dense(x, up_w, up_b, name + ".up")
        gelu = g.op("Mul", [g.op("Mul", [up, half]), g.op("Add", [one, g.op("Erf", [g.op("Mul", [up, inv_sqrt2])])])])
        x = layer_norm(g.op("Add", [dense(gelu, down_w, down_b, name + ".down"), x]), output_norm, name + ".output_norm")
    summed = g.op("ReduceSum", [g.op("Mul", [x, g.op("Unsqueeze", ["mask", axis_last])]), axis_tokens], keepdims=0)
    counts = g.op("Max", [g.op("ReduceSum", ["mask", axis_tokens], keepdims=1), g.constant("min_count", np.array(1e-9, f32))])
    pooled = g.op("Div", [summed, counts])
    norms = g.op("Max", [g.op("ReduceL2", [pooled, axis_last], keepdims=1), g.constant("min_norm", np.array(1e-12, f32))])
    g.op("Div", [pooled, norms], ["vectors"])
    graph = helper.make_graph(
        g.nodes, "minilm",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "tokens"]),
         helper.make_tensor_value_info("positions", TensorProto.INT64, ["tokens"]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "tokens"])],
        [helper.make_tensor_value_info("vectors", TensorProto.FLOAT, ["batch", dimension])],
        g.initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)]).SerializeToString()


class OnnxForward:
    """`(token_ids [B, L] int64, mask [B, L] float32) -> vectors [B, dimension]` on one ONNX Runtime thread.
    Thread-safe (`InferenceSession.run` is), and the runtime releases the GIL while it computes."""

    def __init__(self, encoder: MiniLMEncoder) -> None:
        onnxruntime = import_onnxruntime()
        options = onnxruntime.SessionOptions()
        # one thread, never spinning: the engine core owns the other cores (as for numpy's BLAS, `load_encoder`)
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # no arena: it would keep the largest batch's activations (64 texts x 256 tokens: ~100 MB) for good
        options.enable_cpu_mem_arena = False
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        # from a file, not from bytes: a session made from bytes keeps them (the whole model, ~90 MB) for its life
        with tempfile.TemporaryDirectory(prefix="minilm-onnx-") as folder:
            path = Path(folder) / "minilm.onnx"
            path.write_bytes(build_model(encoder))
            self._session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self._positions = np.arange(encoder.position.shape[0], dtype=np.int64)

    def __call__(self, token_ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feeds = {"ids": token_ids, "positions": self._positions[: token_ids.shape[1]], "mask": mask}
        return self._session.run(["vectors"], feeds)[0]
