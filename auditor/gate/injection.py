"""Prompt-injection signals: a documented, weighted pattern list. The score is the sum of the weights
of the signals present, capped at 1; the gate annotates or refuses above configured thresholds.

These are signals, not proof: each one names what it looks for so a reviewer can judge the hit.

The signals are English phrasings; an attacker writes them so that a model still reads them and a pattern does
not: zero-width characters inside the words, Cyrillic or Greek look-alike letters, full-width or mathematical
letters, combining marks, no-break spaces. So each signal also runs on a folded view of the text
(`auditor.gate.unicode_fold`): NFKC, invisible characters removed (or read as spaces), combining marks removed,
and confusables folded to their ASCII prototype per Unicode TR39. A hit in either counts once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from auditor.gate.unicode_fold import fold_for_matching, fold_pattern

# Where the phrasings come from; stored with every injection decision.
SIGNALS_SOURCE = {
    "source": "OWASP Top 10 for LLM Applications 2025, LLM01:2025 Prompt Injection (example attack phrasings)",
    "locator": "https://genai.owasp.org/llmrisk/llm01-prompt-injection/",
    "as_of": "2026-12-02",
    "version": "injection-signals/1",
}


@dataclass(frozen=True, slots=True)
class InjectionSignal:
    rule_id: str
    weight: float
    pattern: re.Pattern[str]
    description: str
    folded: re.Pattern[str]     # the pattern as it reads the folded view (`fold_pattern`)


def _signal(rule_id: str, weight: float, pattern: str, description: str) -> InjectionSignal:
    return InjectionSignal(rule_id, weight, re.compile(pattern, re.IGNORECASE), description,
                           re.compile(fold_pattern(pattern), re.IGNORECASE))


SIGNALS: tuple[InjectionSignal, ...] = (
    _signal("injection.ignore_instructions", 0.6,
            r"\b(ignore|disregard|forget)\b.{0,30}\b(previous|prior|above|earlier|all)\b.{0,20}\b(instructions?|rules?|prompts?|directions?)",
            "asks the model to drop its instructions"),
    _signal("injection.reveal_system_prompt", 0.5,
            r"\b(reveal|print|show|repeat|output)\b.{0,30}\b(system|hidden|initial)\s+(prompt|instructions?|message)",
            "asks for the system prompt"),
    _signal("injection.role_override", 0.4,
            r"\b(you are now|act as|pretend to be|from now on you)\b.{0,40}\b(unfiltered|jailbroken|DAN|no restrictions|without (any )?(rules|limits|restrictions))",
            "tries to re-assign the model's role without limits"),
    _signal("injection.developer_mode", 0.4, r"\b(developer|god|debug|admin)\s+mode\b", "claims a privileged mode"),
    _signal("injection.fake_turn", 0.3, r"(^|\n)\s*(system|assistant)\s*:|<\|(system|im_start)\|>",
            "embeds a fake system/assistant turn or chat-template token"),
    _signal("injection.disable_safety", 0.5,
            r"\b(bypass|disable|turn off|override)\b.{0,30}\b(safety|filters?|guardrails?|moderation|audit)",
            "asks to bypass safety or auditing"),
)


@dataclass(frozen=True, slots=True)
class InjectionAssessment:
    score: float
    hits: tuple[InjectionSignal, ...]


def assess_injection(text: str) -> InjectionAssessment:
    views = fold_for_matching(text)
    hits = tuple(signal for signal in SIGNALS
                 if signal.pattern.search(text) or any(signal.folded.search(view) for view in views))
    return InjectionAssessment(min(1.0, round(sum(s.weight for s in hits), 3)), hits)
