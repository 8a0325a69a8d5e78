"""Shared benchmark helpers: the tiny benchmark checkpoint, seeded workloads, timing, JSON output."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from engine.synthetic import write_tiny_checkpoint

# ~6.6M parameters: 6 layers, hidden 256, 8 query heads sharing 2 KV heads (Llama 3's GQA ratio of 4),
# 8192-token (padded) vocab, tied embeddings
BENCH_MODEL = dict(
    hidden_size=256, intermediate_size=768, num_layers=6, num_heads=8, num_kv_heads=2,
    model_vocab_size=8192, tie_word_embeddings=True, max_position_embeddings=1024, init_std=0.05,
)


def bench_checkpoint() -> Path:
    """Write (once per process) the benchmark checkpoint to a temp folder."""
    root = Path(tempfile.gettempdir()) / f"engine-bench-ckpt-{os.getpid()}"
    if not (root / "config.json").is_file():
        write_tiny_checkpoint(root, **BENCH_MODEL)  # type: ignore[arg-type]
    return root


def count_params(path: Path) -> int:
    from safetensors.torch import load_file  # noqa: PLC0415

    return sum(t.numel() for t in load_file(str(path / "model.safetensors")).values())


def random_prompt(rng: torch.Generator, length: int, low: int = 3, high: int = 8000) -> list[int]:
    """Token ids drawn away from the special tokens (0-2)."""
    return torch.randint(low, high, (length,), generator=rng).tolist()


def rss_mb() -> float:
    """This process's resident memory now, in MB (Linux /proc; elsewhere the peak, from getrusage)."""
    statm = Path("/proc/self/statm")
    if statm.is_file():
        return round(int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    import resource  # noqa: PLC0415 - Unix only

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def median(values: list[float]) -> float:
    return statistics.median(values)


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """--json, --repeats and --threads, as every benchmark takes them."""
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats (default per benchmark)")
    parser.add_argument(
        "--threads", type=int, default=1,
        help="torch CPU threads for every contender (default 1: on a shared machine, multi-threaded "
             "torch spin-waits under oversubscription and timings swing tenfold)",
    )
    parser.add_argument(
        "--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
        help="engine dtype (default auto, as the service runs: bf16 on a CPU with AMX or AVX512-BF16)",
    )


def setup(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Parse the arguments and apply --threads."""
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    return args


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    add_common_args(parser)
    return setup(parser)


def emit(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        for key, value in result.items():
            print(f"{key:32s} {value}")


def log(message: str) -> None:
    """Progress goes to stderr so stdout stays one JSON object."""
    print(message, file=sys.stderr, flush=True)


def step_in_turn(engines: dict[str, tuple[Any, Sequence[Any]]], prompts: Sequence[Any], tag: str,
                 finished: dict[str, list[Any]] | None = None) -> dict[str, float]:
    """Every engine decodes `prompts` (with its own per-prompt sampling params), one step each in
    turn, the engine that goes first rotating: seconds spent per engine. Stepping in turn makes
    drifts in this shared machine's speed hit every engine alike. `finished`, if given, receives each
    engine's final outputs in prompt order."""
    request_ids = {name: [f"{tag}-{name}-{i}" for i in range(len(prompts))] for name in engines}
    for name, (engine, params) in engines.items():
        for request_id, prompt, request_params in zip(request_ids[name], prompts, params, strict=True):
            engine.add_request(request_id, prompt, request_params)
    names = list(engines)
    seconds = dict.fromkeys(names, 0.0)
    final: dict[str, Any] = {}
    turn = 0
    while any(engine.has_unfinished() for engine, _ in engines.values()):
        shift = turn % len(names)
        for name in names[shift:] + names[:shift]:
            engine = engines[name][0]
            if engine.has_unfinished():
                start = time.perf_counter()
                outputs = engine.step()
                seconds[name] += time.perf_counter() - start
                final.update((out.request_id, out) for out in outputs if out.finished)
        turn += 1
    if finished is not None:
        for name in names:
            finished[name] = [final[request_id] for request_id in request_ids[name]]
    return seconds
