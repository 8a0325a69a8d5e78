"""What `auditor loadgen` sends: an intent mix (`medical-diagnosis=0.3,fin-risk=0.3,...`), per-intent SLAs
(`medical-diagnosis:ttft_p99=500ms`), and the prompts of each intent.

The prompts ship in `prompts.jsonl` beside this file (one row per prompt: intent, domain, prompt, source): the
finance, medical and legal questions of `benchmarks/data/hallucination_prompts.jsonl`, under the intents the
scheduler ranks for those domains, and short code-completion asks with no domain. `--prompts FILE` replaces
them. Each request's text ends with a tag unique to the run and the request, so no two requests share a prompt
(prefix-cache hits would flatter the latencies).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROMPTS = Path(__file__).with_name("prompts.jsonl")
SLA_METRICS = ("ttft", "itl", "tpot", "e2e")
_INTENT = re.compile(r"^[a-z0-9_.\-]{1,64}$")      # what the service accepts in X-Intent
_SLA = re.compile(r"^(?P<metric>[a-z][a-z0-9]*)_p(?P<pct>\d{1,2}(?:\.\d+)?)=(?P<value>\d+(?:\.\d+)?)(?P<unit>ms|s)$")


class WorkloadError(ValueError):
    """A mix, SLA or prompt file the load generator cannot use; the message says what and where."""


def parse_mix(text: str) -> dict[str, float]:
    """`intent=weight,...` -> intent -> share (the weights normalised to sum to 1)."""
    weights: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        intent, sep, weight = part.partition("=")
        intent = intent.strip()
        if not sep or not _INTENT.match(intent):
            raise WorkloadError(f"--mix: {part!r} is not intent=weight (intent: a-z, 0-9, '_', '.', '-')")
        try:
            value = float(weight)
        except ValueError:
            raise WorkloadError(f"--mix: the weight of {intent} is not a number: {weight!r}") from None
        if not 0 <= value < float("inf"):
            raise WorkloadError(f"--mix: the weight of {intent} must be a finite number >= 0")
        if intent in weights:
            raise WorkloadError(f"--mix: {intent} is given twice")
        weights[intent] = value
    total = sum(weights.values())
    if not weights or total <= 0:
        raise WorkloadError("--mix needs at least one intent with a weight above 0")
    return {intent: weight / total for intent, weight in weights.items() if weight > 0}


@dataclass(frozen=True, slots=True)
class Sla:
    """One objective: the `percentile` of `metric` for `intent` ("*": every intent) stays at or under
    `threshold_s`. A request counts toward goodput when its own value meets every objective of its intent."""

    intent: str
    metric: str         # ttft | itl | tpot | e2e
    percentile: float
    threshold_s: float

    @property
    def label(self) -> str:
        pct = f"{self.percentile:g}"
        return f"{self.intent}:{self.metric}_p{pct}<={self.threshold_s * 1000:g}ms"

    def applies_to(self, intent: str) -> bool:
        return self.intent in ("*", intent)


def parse_slas(texts: list[str], intents: Mapping[str, float]) -> list[Sla]:
    """`intent:metric_pNN=VALUE(ms|s)[,metric_pNN=...]`, each flag one intent (or `*`)."""
    slas = []
    for text in texts:
        intent, sep, objectives = text.partition(":")
        intent = intent.strip()
        if not sep or not objectives:
            raise WorkloadError(f"--sla {text!r}: expected intent:metric_pNN=VALUE, e.g. medical-diagnosis:ttft_p99=500ms")
        if intent != "*" and intent not in intents:
            raise WorkloadError(f"--sla {text!r}: {intent} is not in the mix ({', '.join(intents)})")
        for objective in (o.strip() for o in objectives.split(",")):
            match = _SLA.match(objective)
            if not match or match["metric"] not in SLA_METRICS:
                raise WorkloadError(f"--sla {text!r}: {objective!r} is not metric_pNN=VALUE(ms|s) with metric one "
                                    f"of {', '.join(SLA_METRICS)}")
            percentile = float(match["pct"])
            if not 0 < percentile < 100:
                raise WorkloadError(f"--sla {text!r}: the percentile must be between 0 and 100")
            value = float(match["value"]) / (1000 if match["unit"] == "ms" else 1)
            slas.append(Sla(intent, match["metric"], percentile, value))
    return slas


@dataclass(frozen=True, slots=True)
class Prompt:
    intent: str
    domain: str | None
    text: str


def load_prompts(path: Path | None, intents: Mapping[str, float]) -> dict[str, list[Prompt]]:
    """The prompts of each intent in the mix; every intent must have at least one."""
    source = path or PROMPTS
    by_intent: dict[str, list[Prompt]] = {}
    try:
        lines = source.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise WorkloadError(f"cannot read the prompts file {source}: {exc.strerror or exc}") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row: Any = json.loads(line)
            prompt = Prompt(str(row["intent"]), row.get("domain") or None, str(row["prompt"]))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise WorkloadError(f"{source}:{number}: expected a JSON object with intent, prompt (and domain)") from None
        by_intent.setdefault(prompt.intent, []).append(prompt)
    missing = [intent for intent in intents if intent not in by_intent]
    if missing:
        raise WorkloadError(f"no prompts for {', '.join(missing)} in {source} (it has {', '.join(sorted(by_intent))}); "
                            "give --prompts FILE with rows for them")
    return {intent: by_intent[intent] for intent in intents}


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    index: int
    intent: str
    domain: str | None
    text: str

    def body(self, *, model: str, max_tokens: int) -> dict[str, Any]:
        return {"model": model, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}, "messages": [{"role": "user", "content": self.text}]}

    def headers(self) -> dict[str, str]:
        headers = {"X-Intent": self.intent}
        if self.domain:
            headers["X-Domain"] = self.domain
        return headers


def plan(mix: Mapping[str, float], prompts: Mapping[str, list[Prompt]], *, seed: int, tag: str) -> Iterator[PlannedRequest]:
    """An endless, reproducible stream of requests: intents drawn by their shares, each intent's prompts in a
    shuffled cycle, each text tagged with (tag, index)."""
    rng = random.Random(seed)
    intents, shares = list(mix), list(mix.values())
    orders = {intent: rng.sample(pool, len(pool)) for intent, pool in prompts.items()}
    cursors = dict.fromkeys(intents, 0)
    index = 0
    while True:
        intent = rng.choices(intents, shares)[0]
        order = orders[intent]
        prompt = order[cursors[intent] % len(order)]
        cursors[intent] += 1
        yield PlannedRequest(index, intent, prompt.domain, f"{prompt.text} (#{tag}{index:05d})")
        index += 1
