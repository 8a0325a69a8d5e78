"""The demo, start to end: start the service, send the scripted requests, play the four scenes, hand the
report to the caller while the service is still up (`--serve` keeps it there), stop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from auditor.demo.blocked import BlockedResult, ask_and_show_block
from auditor.demo.kg_constraint import ConstraintResult, constraint_off_and_on
from auditor.demo.reaudit import ReauditResult, import_and_reaudit
from auditor.demo.script import DemoResult, ScriptedRequest, send
from auditor.demo.service import running_service, sqlite_path
from auditor.demo.tamper import TamperResult, tamper_and_verify
from auditor.settings import Settings

SCENE_DOMAINS = ("finance", "medical")   # the KGs the scenes need, loaded whatever --domains says

# Written for the demo (not taken from the benchmark sets), each checked under greedy decoding with the bundled
# model. Scene 1: unconstrained, the model answers about another country (the kind of wrong entity it names most
# often); the question's neighbourhood is India and the list's members. Scene 2: a wrong maximum dose (the label
# says 40 mg), which the constraint cannot prevent (a number is not an entity), so the output gate has to.
CONSTRAINT_REQUEST = ScriptedRequest("finance", "fin-risk", "Is India on the FATF call for action list?")
BLOCKED_REQUEST = ScriptedRequest("medical", "medical-diagnosis", "What is the maximum daily dose of Citalopram for adults?")

# What someone with write access to the database would put in place of the blocked answer.
TAMPERED_OUTPUT = "The answer was correct and was released to the client."


@dataclass(slots=True)
class DemoReport:
    scripted: list[DemoResult] = field(default_factory=list)
    constraint: ConstraintResult | None = None
    blocked: BlockedResult | None = None
    reaudit: ReauditResult | None = None
    tamper: TamperResult | None = None


Step = Callable[[str], None]          # told what the demo is doing now
Done = Callable[[DemoReport, str], None]   # the report and the base URL, while the service is up


def run_demo(settings: Settings, requests: list[ScriptedRequest], *, max_tokens: int = 160,
             startup_timeout: float = 600.0, step: Step | None = None, done: Done | None = None) -> DemoReport:
    """Start the service, send `requests`, play the scenes, call `done`, stop the service."""
    say = step or (lambda _message: None)
    report = DemoReport()
    with running_service(settings, startup_timeout=startup_timeout) as base_url, \
            httpx.Client(base_url=base_url, timeout=300) as client:
        say(f"sending {len(requests)} scripted request(s) ...")
        report.scripted = [send(client, request, max_tokens=max_tokens) for request in requests]
        say("1/4 the KG constraint: the same question with the constraint off and on ...")
        report.constraint = constraint_off_and_on(client, settings, CONSTRAINT_REQUEST, max_tokens=max_tokens)
        say("2/4 a wrong answer at the output gate ...")
        report.blocked = ask_and_show_block(client, BLOCKED_REQUEST, max_tokens=max_tokens)
        say("3/4 another LLM's answers: import, a new KG version, re-audit ...")
        report.reaudit = import_and_reaudit(client, settings, sqlite_path(settings).parent)
        say("4/4 a tampered copy of the trail and `auditor audit verify-chain` ...")
        report.tamper = tamper_and_verify(settings, record_id=report.blocked.audit_id, replacement=TAMPERED_OUTPUT)
        if done is not None:
            done(report, base_url)
    return report
