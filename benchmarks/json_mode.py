"""JSON mode on the bundled model over the hallucination prompts: the share of outputs that parse, before and after.

"before" is JSON mode as it was: any whitespace between tokens (up to 32 in a row), and a value that
max_tokens cuts stays cut. "after" is the default now: compact (at most one whitespace character in a row)
and closed within budget (when the tokens left barely suffice, the shortest closing is forced, and the
response says `finish_reason: length` with `audit.structured_output`). Each prompt of
benchmarks/data/hallucination_prompts.jsonl goes through the chat template with
`response_format={"type": "json_object"}`, greedy, the same max_tokens both sides; chunks of prompts run
before/after interleaved (alternating which goes first), each side on its own engine, both warmed alike.

    python -m benchmarks.json_mode --json          # 60 prompts (20 per domain)
    python -m benchmarks.json_mode --all --json    # all 240
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from benchmarks._common import emit
from engine.llm_engine import LLMEngine
from engine.outputs import RequestOutput
from engine.processors.json_mode import JsonModeProcessor
from engine.sampling_params import SamplingParams

REPO_ROOT = Path(__file__).resolve().parent.parent
PROMPTS = REPO_ROOT / "benchmarks" / "data" / "hallucination_prompts.jsonl"
MODEL = REPO_ROOT / "auditor" / "bundled_model"
SIDES = {"before": {"compact": False, "close_within_budget": False}, "after": {}}


def _prompts(take_all: bool) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in PROMPTS.read_text().splitlines() if line.strip()]
    if take_all:
        return rows
    per_domain: Counter[str] = Counter()
    chosen = []
    for row in rows:
        if per_domain[row["domain"]] < 20:
            per_domain[row["domain"]] += 1
            chosen.append(row)
    return chosen


def _parses(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _run(engine: LLMEngine, prompts: list[str], max_tokens: int) -> tuple[float, list[RequestOutput]]:
    params = [SamplingParams(temperature=0, max_tokens=max_tokens, response_format={"type": "json_object"})
              for _ in prompts]
    started = time.perf_counter()
    outputs = engine.generate(prompts, params)
    return time.perf_counter() - started, outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: steady timings when shared)")
    parser.add_argument("--all", action="store_true", help="all 240 prompts (default: 20 per domain)")
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--chunk", type=int, default=10, help="prompts per interleaved chunk")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = _prompts(args.all)
    engines = {side: LLMEngine.from_pretrained(MODEL, logits_processors=[JsonModeProcessor.for_checkpoint(MODEL, **kw)])
               for side, kw in SIDES.items()}
    texts = {side: [engine.tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}])
                    for r in rows] for side, engine in engines.items()}
    for side, engine in engines.items():   # warm both alike: grammar compiled, kernels touched
        _run(engine, texts[side][:2], 8)
    outputs: dict[str, list[RequestOutput]] = {side: [] for side in SIDES}
    seconds: dict[str, float] = {side: 0.0 for side in SIDES}
    for number, start in enumerate(range(0, len(rows), args.chunk)):
        order = list(SIDES) if number % 2 == 0 else list(reversed(SIDES))
        for side in order:
            elapsed, chunk = _run(engines[side], texts[side][start:start + args.chunk], args.max_tokens)
            seconds[side] += elapsed
            outputs[side].extend(chunk)
    result: dict[str, Any] = {"prompts": len(rows), "max_tokens": args.max_tokens}
    for side, outs in outputs.items():
        closed = sum(any(e.kind == "closed_for_budget" for e in o.events) for o in outs)
        tokens = sum(len(o.token_ids) for o in outs)
        result[side] = {
            "parse_share": round(sum(_parses(o.text) for o in outs) / len(outs), 4),
            "finish_reasons": dict(Counter(o.finish_reason for o in outs)),
            "closed_for_budget": closed,
            "whitespace_run_outputs": sum(("  " in o.text) or ("\n\n" in o.text) or ("\n " in o.text) for o in outs),
            "mean_tokens": round(tokens / len(outs), 1),
            "seconds": round(seconds[side], 2),
            "ms_per_token": round(1000 * seconds[side] / max(1, tokens), 3),
        }
    result["failures_after"] = [o.text[:120] for o in outputs["after"] if not _parses(o.text)][:5]
    emit(result, args.json)


if __name__ == "__main__":
    main()
