"""Evaluator doubles for the worker/re-audit tests, loadable by Celery worker subprocesses through
`AUDITOR_WORKER_EVALUATOR=tests.auditor.scoring_doubles:MarkerEvaluator`.

MarkerEvaluator judges each sentence by a visible marker, so a test can predict every verdict:
a sentence containing "[false]" is contradicted, any other sentence is supported. Text containing
"[explode]" raises (a transient-looking failure that never heals). Knobs come from the environment
so that subprocess workers see them: AUDITOR_TEST_EVALUATOR_VERSION, AUDITOR_TEST_EVALUATOR_DELAY_S.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from auditor.jobs.scoring import Scored, ScoringError

_SENTENCE = re.compile(r"[^.!?]+[.!?]?")


class MarkerEvaluator:
    def __init__(self, version: str | None = None, delay_s: float | None = None) -> None:
        self.version = version or os.environ.get("AUDITOR_TEST_EVALUATOR_VERSION", "marker/1")
        self.delay_s = delay_s if delay_s is not None else float(os.environ.get("AUDITOR_TEST_EVALUATOR_DELAY_S", "0"))
        self.calls = 0

    def evaluate(self, *, text: str, domain: str | None, prompt: str | None) -> Scored:
        self.calls += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        if domain is None:
            raise ScoringError("the record names no domain")
        if "[explode]" in text:
            raise RuntimeError("evaluator crashed on this text")
        claims: list[dict[str, Any]] = []
        for match in _SENTENCE.finditer(text):
            sentence = match.group().strip()
            if not sentence:
                continue
            false = "[false]" in sentence
            claims.append({
                "text": sentence.replace("[false]", "").strip(), "span": [match.start(), match.end()],
                "kind": "statement", "verdict": "contradicted" if false else "supported", "confidence": 0.9,
                "evidence": [{"kind": "rule", "description": "marked false" if false else "unmarked",
                              "source": f"marker evaluator {self.version}", "as_of": "2026-12-02"}],
                "rule_ids": ["test.marker"],
            })
        contradicted = sum(1 for c in claims if c["verdict"] == "contradicted")
        fer = contradicted / len(claims) if claims else None
        return Scored(claims=claims, fer=fer, citation_confidence=1.0 if claims else None,
                      joint_score=(1 - fer) if fer is not None else None,
                      gate_action="block" if contradicted else "allow",
                      kg_version="kg-test", rule_pack_hash=f"pack-{self.version}")


class Unscored:
    """An evaluator that scores nothing (every record fails with a reason): keeps live scoring from moving
    a test's current verdicts away from the gate's inline ones."""

    version = "unscored/1"

    def evaluate(self, *, text: str, domain: str | None, prompt: str | None) -> Scored:
        raise ScoringError("this test keeps the gate's inline verdicts")


def append_output(database: Any, output: str | None, *, domain: str | None = "finance", tenant: str = "acme",
                  claims: list[dict[str, Any]] | None = None, gate_decisions: list[dict[str, Any]] | None = None,
                  content_mode: str = "raw", fer: float | None = None) -> str:
    """Append one completed record the way the inference path does; returns its audit id."""
    from auditor.trail.records import NewRecord, append_record

    record = NewRecord(tenant=tenant, status="completed", endpoint="chat", domain=domain, model_id="test-model",
                       content_mode=content_mode, prompt="What about it?", output=output, delivered_output=output,
                       claims=claims, gate_decisions=gate_decisions or [], fer=fer)
    return append_record(database, record).id
