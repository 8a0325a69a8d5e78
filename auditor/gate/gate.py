"""Gate decisions, the input stage and the per-sentence output stage.

Actions, weakest to strongest: allow < annotate < redact < block < refuse. A request's gate action
is the strongest decision taken on it. Every decision is kept for the audit record.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from auditor.gate.injection import SIGNALS_SOURCE, assess_injection
from auditor.gate.pii import PiiMatch, detector_versions, find_pii, redact_pii
from auditor.gate.policy import POLICY_SOURCE, policies_for
from auditor.gate.sentence_cut import SentenceCutter

ACTIONS = ("allow", "annotate", "redact", "block", "refuse")
_RANK = {action: rank for rank, action in enumerate(ACTIONS)}
# A reply that opens with a bare verdict ("Yes.", "No, it is not.", "That's correct.") states nothing of its own:
# it takes its meaning from the sentence after it, so it is released or withheld together with that one.
_ANSWER_WORDS = frozenset({"yes", "no", "yeah", "nope", "correct", "incorrect", "true", "false", "right", "wrong",
                           "indeed", "exactly", "absolutely", "sure", "certainly", "definitely", "not", "quite",
                           "that", "that's", "this", "is", "it", "it's", "isn't", "so"})
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
_BARE_ANSWER_MAX_WORDS = 4


def is_bare_answer(sentence: str) -> bool:
    """A short sentence made only of answer words ("Yes.", "No, that's not right.")"""
    words = _WORD.findall(sentence.lower().replace("\u2019", "'"))
    return 0 < len(words) <= _BARE_ANSWER_MAX_WORDS and all(word in _ANSWER_WORDS for word in words)


@dataclass(slots=True)
class GateDecision:
    stage: str          # input | output
    rule_id: str
    action: str         # one of ACTIONS
    reason: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def strongest(actions: list[str]) -> str:
    return max(actions, key=_RANK.__getitem__, default="allow")


# -- input stage ---------------------------------------------------------------------------------


@dataclass(slots=True)
class InputGateResult:
    redacted_text: str
    pii: list[PiiMatch]
    decisions: list[GateDecision]
    annotations: list[str]

    @property
    def action(self) -> str:
        return strongest([d.action for d in self.decisions])

    @property
    def refusal(self) -> GateDecision | None:
        return next((d for d in self.decisions if d.action == "refuse"), None)


def check_input(text: str, *, intent: str | None, annotate_score: float, refuse_score: float,
                detected_domains: Sequence[str] = ()) -> InputGateResult:
    """PII (redacted from the stored copy), prompt-injection score, and the intent's domain policies (or, for a
    request that names no intent, the policies of the domains detected in its prompt)."""
    redacted, pii = redact_pii(text, find_pii(text))
    decisions: list[GateDecision] = []
    if pii:
        kinds = sorted({m.kind for m in pii})
        decisions.append(GateDecision("input", "pii.input", "redact",
                                      f"{len(pii)} PII span(s) redacted from the stored prompt ({', '.join(kinds)})",
                                      {"kinds": kinds, "count": len(pii), "applies_to": "stored copy",
                                       "detectors": detector_versions()}))
    injection = assess_injection(text)
    if injection.score >= annotate_score:
        action = "refuse" if injection.score >= refuse_score else "annotate"
        decisions.append(GateDecision(
            "input", "injection.score", action,
            f"prompt-injection score {injection.score:.2f} ({'; '.join(s.description for s in injection.hits)})",
            {"score": injection.score, "signals": [s.rule_id for s in injection.hits], "provenance": SIGNALS_SOURCE},
        ))
    annotations = []
    for policy in policies_for(intent, detected_domains=detected_domains):
        detail = {"intent": intent, "provenance": POLICY_SOURCE}
        if intent is None:
            detail["detected_domain"] = policy.domain
        decisions.append(GateDecision("input", policy.rule_id, policy.action, policy.message, detail))
        if policy.action == "annotate":
            annotations.append(policy.message)
    return InputGateResult(redacted, pii, decisions, annotations)


# -- output stage --------------------------------------------------------------------------------


@dataclass(slots=True)
class Verification:
    """What an output validator found in one piece of text."""

    claims: list[dict[str, Any]] = field(default_factory=list)   # {text, verdict, evidence, rule_id, ...}
    decisions: list[GateDecision] = field(default_factory=list)  # one per failed rule, with its on_fail action
    redacted_text: str | None = None                              # used when a decision says "redact"


class Verifier(Protocol):
    def rule_pack_hash(self, domain: str | None) -> str | None: ...

    def verify(self, text: str, *, domain: str | None, prompt: str | None, intent: str | None = None) -> Verification: ...


class OutputGate:
    """Sees each sentence before it is released to the client; blocked text is never released.

    `hold_all` (JSON mode) gates the whole output at the end: a JSON value cut at a sentence
    boundary would not parse, so nothing is streamed before the value is complete and checked.
    `release_at_end=False` (tool calls) gates it at the end too but releases nothing: the caller splits
    `delivered` into content and calls, and the tool policies decide on the calls before anything leaves.
    """

    def __init__(self, verifier: Verifier, *, domain: str | None, prompt: str | None, intent: str | None = None,
                 hold_all: bool = False, pii_action: str = "redact", release_at_end: bool = True,
                 domains_for: Callable[[str], list[str]] | None = None) -> None:
        """`domains_for` (requests that named no domain): given each sentence before it is verified, returns
        every domain detected so far; the sentence is verified under each of them."""
        self.verifier = verifier
        self.domains_for = domains_for
        self.pii_action = pii_action
        self.domain = domain
        self.prompt = prompt
        self.intent = intent
        self.hold_all = hold_all
        self.release_at_end = release_at_end
        self.claims: list[dict[str, Any]] = []
        self.decisions: list[GateDecision] = []
        self.annotations: list[str] = []
        self._delivered: list[str] = []   # joined on read: appending to one string copied it per sentence
        self._opened = False               # some non-blank text was delivered (a bare answer is held only before)
        self.refused = False
        self._text = SentenceCutter()   # generated text not yet gated, and where its sentences end
        self._held: str | None = None   # a bare answer waiting for the sentence it answers for

    @property
    def verifies(self) -> bool:
        """Whether sentences go to validators (a domain, or detection that may find one)."""
        return self.domain is not None or self.domains_for is not None

    def feed(self, delta: str) -> str:
        """Add generated text; return the gated text that may be sent now (possibly empty)."""
        return self.release_complete() if self.buffer(delta) else ""

    def buffer(self, delta: str) -> bool:
        """Add generated text without judging it; True when a complete sentence now waits for
        `release_complete` (cheap: the caller can judge on another thread only when there is work)."""
        if self.refused:
            return False
        self._text.append(delta)
        return not self.hold_all and self._text.next_end() is not None

    def release_complete(self) -> str:
        """Gate every complete sentence in the buffer; return the text that may be sent now."""
        if self.refused or self.hold_all:
            return ""
        released = []
        while not self.refused and (end := self._text.next_end()) is not None:
            released.append(self._gate(self._text.cut(end)))
        self._text.compact()
        return "".join(released)

    def finish(self) -> str:
        """Gate whatever is left in the buffer (the last, unterminated sentence)."""
        if self.refused:
            return ""
        rest, self._text = self._text.rest, SentenceCutter()
        released = self._gate(rest) if rest else ""
        if self._held is not None:   # a bare answer with nothing after it stands on its own
            held, self._held = self._held, None
            released += self._release(self._screen_pii(held))
        return released if self.release_at_end else ""

    def _gate(self, sentence: str) -> str:
        body = sentence.strip()
        if body and self._held is None and not self._opened and is_bare_answer(body):
            self._held = sentence   # judged with the next sentence: "Yes." must not leave before a blocked claim
            return ""
        text, withheld = self._judge(sentence, body)
        held, self._held = self._held, None
        if held is not None:
            if withheld or (body and not text.strip()):   # blocked, refused, or all of it PII-blocked
                self.decisions.append(GateDecision(
                    "output", "gate.bare_answer", "block",
                    f"the opening {held.strip()!r} answered for a sentence that was withheld, so it was withheld too"))
            else:
                text = self._screen_pii(held) + text
        return self._release(text)

    def _judge(self, sentence: str, body: str) -> tuple[str, bool]:
        """What of one sentence may be released, and whether the sentence itself was withheld (blocked, or
        replaced by a refusal)."""
        if not body:
            return sentence, False
        found = self._verify(body)
        self.claims.extend(found.claims)
        self.decisions.extend(found.decisions)
        action = strongest([d.action for d in found.decisions])
        self.annotations.extend(d.reason for d in found.decisions if d.action == "annotate")
        trailing = sentence[len(sentence.rstrip()):]
        if action == "refuse":
            self.refused = True
            rule = next(d.rule_id for d in found.decisions if d.action == "refuse")
            return f"I can't provide this answer: it failed the {rule} check.", True
        if action == "block":
            return "", True
        if action == "redact":
            return self._screen_pii((found.redacted_text or "[redacted]") + trailing), False
        return self._screen_pii(sentence), False

    def _verify(self, body: str) -> Verification:
        domains: list[str | None] = list(self.domains_for(body)) if self.domains_for else [self.domain]
        parts = [self.verifier.verify(body, domain=domain, prompt=self.prompt, intent=self.intent)
                 for domain in domains or [None]]
        if self.domains_for is None:
            return parts[0]
        merged = Verification()
        for domain, part in zip(domains, parts, strict=False):
            merged.claims += [{**claim, "domain": claim.get("domain", domain)} for claim in part.claims]
            merged.decisions += part.decisions
        redactions = [part.redacted_text for part in parts if part.redacted_text is not None]
        if len(redactions) == 1:
            merged.redacted_text = redactions[0]
        elif redactions:   # two packs redact different spans of one sentence: neither copy is clean, withhold it
            merged.decisions.append(GateDecision(
                "output", "gate.multi_domain_redaction", "block",
                f"validators of {', '.join(str(d) for d in domains)} each redacted part of this sentence"))
        return merged

    def _screen_pii(self, text: str) -> str:
        """The output's PII rule, after the validators have judged the sentence as the model wrote it: PII in
        model output (a memorised SSN, an email from the prompt) is redacted by default, or per domain
        annotated, blocked or allowed (`AUDITOR_OUTPUT_PII_ACTION`)."""
        if self.pii_action == "allow":
            return text
        matches = find_pii(text)
        if not matches:
            return text
        kinds = sorted({m.kind for m in matches})
        verb = {"redact": "redacted from", "block": "blocked in", "annotate": "found in"}[self.pii_action]
        self.decisions.append(GateDecision("output", "pii.output", self.pii_action,
                                           f"{len(matches)} PII span(s) {verb} the output ({', '.join(kinds)})",
                                           {"kinds": kinds, "count": len(matches), "detectors": detector_versions()}))
        if self.pii_action == "block":
            return ""
        if self.pii_action == "annotate":
            self.annotations.append(f"the output contains PII ({', '.join(kinds)})")
            return text
        return redact_pii(text, matches)[0]

    def _release(self, text: str) -> str:
        self._delivered.append(text)
        self._opened = self._opened or bool(text.strip())
        return text

    @property
    def delivered(self) -> str:
        """The text released so far."""
        if len(self._delivered) > 1:
            self._delivered[:] = ["".join(self._delivered)]
        return self._delivered[0] if self._delivered else ""

    @property
    def action(self) -> str:
        return strongest([d.action for d in self.decisions])

    def claim_counts(self) -> dict[str, int]:
        counts = {"supported": 0, "contradicted": 0, "unverifiable": 0}
        for claim in self.claims:
            verdict = claim.get("verdict")
            if verdict in counts:
                counts[verdict] += 1
        return counts

    def fer(self) -> float | None:
        """FER = contradicted / (supported + contradicted), None when no claim was verified."""
        counts = self.claim_counts()
        verified = counts["supported"] + counts["contradicted"]
        return counts["contradicted"] / verified if verified else None


class NoClaimVerifier:
    """Used when no validator is available: extracts no claims and takes no output decisions."""

    def rule_pack_hash(self, domain: str | None) -> str | None:
        return None

    def verify(self, text: str, *, domain: str | None, prompt: str | None, intent: str | None = None) -> Verification:
        return Verification()
