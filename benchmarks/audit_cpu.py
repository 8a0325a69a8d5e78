"""CPU the audit spends per request beside the engine: KG allowed-set views and MiniLM sentence embeddings.

Views: the allowed set of every finance, medical and legal prompt of the service benchmarks' mix
(`benchmarks/data/hallucination_prompts.jsonl`, linked as the service links them) is built into a view on the
bundled model's tokenizer, each set once and first-seen (a fresh processor per run, as after a start). Per
domain: build ms (mean, median, max) and `approx_bytes` (what the view cache counts against
`AUDITOR_KG_CONSTRAINT_VIEW_MB`).

Embeddings: the no-domain prompts' sentences (`benchmarks/data/offdomain_chat.jsonl`, split as detection splits
them, shuffled) encoded alone and in groups of 2, 4 and 8 (what `knowledge_graphs.detection.coalescing` puts
into one forward when requests arrive together): CPU ms per sentence, best of --repeats and on the first pass
(fresh encoders: every input shape first-seen), groups and MiniLM's backends interleaved (ONNX Runtime fp32,
numpy fp32, OpenVINO fp32, and OpenVINO bf16 where the CPU computes bf16 natively). `onnxruntime_over`: how many
times faster each is than ONNX Runtime (best of the repeats).

Run: python -m benchmarks.audit_cpu --json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from benchmarks._common import emit, log

DATA = Path(__file__).parent / "data"
DOMAINS = ("finance", "medical", "legal")
GROUPS = (1, 2, 4, 8)


def allowed_sets() -> dict[str, list[list[str]]]:
    from knowledge_graphs import load_kg
    from knowledge_graphs.linking import get_linker
    from knowledge_graphs.neighbourhood import DOMAIN_DEFAULTS, allowed_entities

    kgs = {domain: load_kg(domain) for domain in DOMAINS}
    found: dict[str, list[list[str]]] = {domain: [] for domain in DOMAINS}
    for line in (DATA / "hallucination_prompts.jsonl").read_text().splitlines():
        row = json.loads(line)
        domain = row["domain"]
        if domain not in kgs:
            continue
        defaults = DOMAIN_DEFAULTS.get(domain)
        anchors = list(dict.fromkeys(m.entity_id for m in get_linker(kgs[domain], defaults.types if defaults else None)
                                     .link(row["prompt"])))
        if anchors:
            ids = sorted(allowed_entities(kgs[domain], anchors))
            if ids not in found[domain]:
                found[domain].append(ids)
    return found


def view_builds() -> dict[str, dict[str, float]]:
    import auditor
    from auditor.serving.engine_loading import load_tokenizer
    from engine.loader import load_model_config
    from knowledge_graphs import load_kg
    from knowledge_graphs.decoding.constraint import KGConstraintProcessor

    path = Path(auditor.__file__).parent / "bundled_model"
    config = load_model_config(path)
    tokenizer = load_tokenizer(path, config)
    sets = allowed_sets()
    processor = KGConstraintProcessor(tokenizer, vocab_size=config.vocab_size, eos_token_ids=tokenizer.eos_token_ids,
                                      kgs={domain: load_kg(domain) for domain in DOMAINS})
    report = {}
    for domain in DOMAINS:
        masks = processor.domains[domain]
        times, sizes = [], []
        for ids in sets[domain]:
            started = time.process_time()
            view = masks.view(ids)
            times.append((time.process_time() - started) * 1e3)
            sizes.append(view.approx_bytes)
        report[domain] = {"sets": len(times), "build_ms_mean": round(statistics.mean(times), 2),
                          "build_ms_median": round(statistics.median(times), 2), "build_ms_max": round(max(times), 1),
                          "view_kb_mean": round(statistics.mean(sizes) / 1024, 1)}
        log(f"{domain}: {report[domain]}")
    return report


def minilm_variants() -> dict[str, object]:
    """Every backend and dtype this machine runs MiniLM in, fresh (nothing compiled for any shape yet)."""
    from knowledge_graphs.minilm import MiniLMEncoder, model_path
    from knowledge_graphs.minilm_openvino import native_bf16

    variants = [("onnxruntime", "float32"), ("numpy", "float32"), ("openvino", "float32")]
    if native_bf16():
        variants.append(("openvino", "bfloat16"))
    return {f"{backend}-{dtype}": MiniLMEncoder(model_path(), backend=backend, dtype=dtype) for backend, dtype in variants}


def embedding_groups(repeats: int) -> dict[str, object]:
    from knowledge_graphs.detection.detector import split_for_detection

    encoders = minilm_variants()
    texts = [json.loads(line)["prompt"] for line in (DATA / "offdomain_chat.jsonl").read_text().splitlines()]
    pieces = [piece for text in texts for piece in split_for_detection(text)]
    random.Random(0).shuffle(pieces)
    pieces = pieces[: 8 * (len(pieces) // 8)]
    first: dict[tuple[str, int], float] = {}
    best: dict[tuple[str, int], float] = {}
    for _ in range(repeats):
        for group in GROUPS:   # interleaved, backends too: the machine is shared and noisy
            for variant, encoder in encoders.items():
                started = time.process_time()
                for start in range(0, len(pieces), group):
                    encoder.encode(pieces[start : start + group])
                per_piece = (time.process_time() - started) / len(pieces) * 1e3
                # the first pass meets every shape first (OpenVINO prepares its kernels per input shape)
                first.setdefault((variant, group), per_piece)
                best[variant, group] = min(per_piece, best.get((variant, group), per_piece))
    report: dict[str, object] = {
        variant: {**{f"cpu_ms_per_sentence_in_{group}s": round(best[variant, group], 2) for group in GROUPS},
                  **{f"first_pass_cpu_ms_per_sentence_in_{group}s": round(first[variant, group], 2) for group in GROUPS}}
        for variant in encoders
    }
    report["onnxruntime_over"] = {variant: {group: round(best["onnxruntime-float32", group] / best[variant, group], 2)
                                            for group in GROUPS} for variant in encoders}
    report["sentences"] = len(pieces)
    log(f"embeddings: {report}")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=("views", "embeddings"), help="run one part")
    args = parser.parse_args(argv)
    report: dict[str, object] = {"benchmark": "audit_cpu"}
    if args.only != "embeddings":
        report["views"] = view_builds()
    if args.only != "views":
        report["embeddings"] = embedding_groups(args.repeats)
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
