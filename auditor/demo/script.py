"""The demo's ordinary traffic: a scripted set of finance, medical and legal questions sent through the HTTP
API with `X-Intent`/`X-Domain` headers, and what the audit trail recorded for each."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from auditor.demo.service import DemoError


@dataclass(frozen=True, slots=True)
class ScriptedRequest:
    domain: str
    intent: str
    question: str


# One per domain first: `--quick` sends only these.
SCRIPT: tuple[ScriptedRequest, ...] = (
    ScriptedRequest("finance", "fin-risk", "Is Iran on the FATF call for action list?"),
    ScriptedRequest("medical", "medical-diagnosis", "What is the maximum daily dose of Metformin for adults?"),
    ScriptedRequest("legal", "legal-advice", "What is the citation of Miranda v. Arizona?"),
    ScriptedRequest("finance", "fin-risk", "What currency does Japan use?"),
    ScriptedRequest("finance", "fin-risk", "What amount triggers Currency Transaction Report?"),
    ScriptedRequest("medical", "medical-diagnosis", "Which drugs interact with Warfarin?"),
    ScriptedRequest("medical", "medical-diagnosis", "What is Lisinopril used for?"),
    ScriptedRequest("legal", "legal-advice", "Which court decided Brown v. Board of Education?"),
    ScriptedRequest("legal", "legal-advice", "Can I cite Varghese v. China Southern Airlines Co., Ltd., 925 F.3d 1339 (11th Cir. 2019)?"),
)


@dataclass(slots=True)
class DemoResult:
    """What the response said about one request's audit."""
    request: ScriptedRequest
    audit_id: str
    answer: str            # what the client received (a withheld answer's notice when the gate blocked it)
    gate_action: str
    claims: dict[str, int]
    fer: float | None
    seconds: float


def scripted_requests(*, quick: bool, domains: list[str] | None = None) -> list[ScriptedRequest]:
    """The script, narrowed to `domains`; `quick` keeps the first request of each domain."""
    chosen = [r for r in SCRIPT if domains is None or r.domain in domains]
    if quick:
        firsts: dict[str, ScriptedRequest] = {}
        for r in chosen:
            firsts.setdefault(r.domain, r)
        chosen = list(firsts.values())
    return chosen




def send(client: httpx.Client, request: ScriptedRequest, *, max_tokens: int) -> DemoResult:
    return chat(client, request, max_tokens=max_tokens)


def chat(client: httpx.Client, request: ScriptedRequest, *, max_tokens: int, seed: int | None = None) -> DemoResult:
    """One greedy chat completion through the HTTP API; the response's audit summary is what was recorded."""
    started = time.perf_counter()
    body: dict[str, Any] = {"model": "auditor", "messages": [{"role": "user", "content": request.question}],
                            "max_tokens": max_tokens, "temperature": 0}
    if seed is not None:
        body["seed"] = seed
    response = client.post("/v1/chat/completions", headers={"X-Intent": request.intent, "X-Domain": request.domain},
                           json=body)
    seconds = time.perf_counter() - started
    if response.status_code != 200:
        raise DemoError(f"{request.domain} request failed with HTTP {response.status_code}: {response.text[:300]}")
    reply: dict[str, Any] = response.json()
    audit = reply.get("audit") or {}
    audit_id = response.headers.get("X-Audit-Id") or reply["audit_id"]
    return DemoResult(request, audit_id, reply["choices"][0]["message"]["content"] or "",
                      audit.get("gate_action") or "none", dict(audit.get("claims") or {}), audit.get("fer"), seconds)
