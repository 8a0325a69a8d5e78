"""Domain detection decides the same in bf16 as in fp32, except on texts the classifier scores at the threshold.

MiniLM runs in bf16 where the CPU computes it natively (`knowledge_graphs.minilm`). Its vectors move the
classifier's scores by thousandths, so a text (or one of its sentences) scored within that of the threshold,
or with two domains scored within that of each other, may be decided the other way; no other may. Measured on the frozen evaluation
sets (benchmarks/data: the blind chatbot answers with their prompts, and the off-domain chat), which were
written apart from the detector."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from knowledge_graphs import load_kg, minilm_openvino
from knowledge_graphs.detection import DomainDetector
from knowledge_graphs.detection.detector import Detection

pytestmark = pytest.mark.skipif(not minilm_openvino.native_bf16(), reason="this CPU does not compute bf16 natively")

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
SCORE_MOVE = 0.01          # the most a bf16 vector may move a domain's probability
MOST_DECIDED_OTHERWISE = 0.01


def evaluation_texts() -> list[tuple[str, str | None]]:
    texts: list[tuple[str, str | None]] = []
    for domain in ("finance", "legal", "medical"):
        for line in (DATA / f"answers_{domain}.jsonl").read_text().splitlines():
            row = json.loads(line)
            texts.append((row["prompt"], row["answer"]))
    texts += [(json.loads(line)["prompt"], None) for line in (DATA / "offdomain_chat.jsonl").read_text().splitlines()]
    return texts


def near_a_boundary(fp32: Detection, bf16: Detection) -> bool:
    """A score of the whole text, or of one sentence that detected a domain alone, within SCORE_MOVE of the
    threshold; or the two best domains within SCORE_MOVE of each other (which comes first)."""
    scores = sorted(fp32.scores.values(), reverse=True)
    sentence_scores = [*fp32.sentence_triggers.values(), *bf16.sentence_triggers.values()]
    return (any(abs(score - fp32.threshold) <= SCORE_MOVE for score in [*scores, *sentence_scores])
            or scores[0] - scores[1] <= SCORE_MOVE)


def test_bf16_decides_as_fp32_but_at_the_threshold() -> None:
    kgs = {d: load_kg(d) for d in ("finance", "legal", "medical")}
    by_dtype = {dtype: DomainDetector(kgs, embedding_dtype=dtype, embedding_cache=0) for dtype in ("float32", "bfloat16")}
    texts = evaluation_texts()
    assert len(texts) > 500
    decided_otherwise = []
    for prompt, answer in texts:
        fp32, bf16 = (detector.detect(prompt, answer) for detector in by_dtype.values())
        assert (fp32.embedding_dtype, bf16.embedding_dtype) == ("float32", "bfloat16")
        assert max(abs(fp32.scores[d] - bf16.scores[d]) for d in fp32.scores) < SCORE_MOVE
        if fp32.domains != bf16.domains or set(fp32.sentence_triggers) != set(bf16.sentence_triggers):
            decided_otherwise.append(prompt)
            assert near_a_boundary(fp32, bf16), (prompt, fp32.to_dict(), bf16.to_dict())
    assert len(decided_otherwise) <= MOST_DECIDED_OTHERWISE * len(texts), decided_otherwise
