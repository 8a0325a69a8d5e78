"""The demo's printed report: the scripted requests, the four scenes, and how to open what they left in the
trail (the CLI, the API, the compliance console)."""

from __future__ import annotations

from typing import Any

from auditor.demo.blocked import BlockedResult
from auditor.demo.kg_constraint import SEED, ConstraintResult, Mention
from auditor.demo.reaudit import OTHER_MODEL, ReauditResult, Verdicts
from auditor.demo.run import DemoReport
from auditor.demo.script import DemoResult
from auditor.demo.tamper import TamperResult
from auditor.settings import Settings


def render(report: DemoReport, settings: Settings, console: Any) -> None:
    render_scripted(report.scripted, console)
    if report.constraint is not None:
        render_constraint(report.constraint, console)
    if report.blocked is not None:
        render_blocked(report.blocked, console)
    if report.reaudit is not None:
        render_reaudit(report.reaudit, console)
    if report.tamper is not None:
        render_tamper(report.tamper, console)


def render_scripted(results: list[DemoResult], console: Any) -> None:
    from rich.table import Table

    table = Table(title="auditor demo: scripted requests through the HTTP API", show_lines=True)
    for column in ("audit id", "intent", "question", "answer", "gate", "claims (s/c/u)", "FER"):
        table.add_column(column, overflow="fold")
    for r in results:
        claims = "/".join(str(r.claims.get(k, 0)) for k in ("supported", "contradicted", "unverifiable"))
        table.add_row(r.audit_id, r.request.intent, r.request.question, _one_line(r.answer), r.gate_action, claims,
                      "-" if r.fer is None else f"{r.fer:.2f}")
    console.print(table)


def render_constraint(result: ConstraintResult, console: Any) -> None:
    from rich.table import Table

    _heading(console, "1. The KG constraint keeps a wrong entity out of the answer")
    console.print(f"Question ({result.request.domain}, greedy decoding, seed {SEED}): {result.request.question}\n"
                  f"Linked in the question: {', '.join(result.anchors)}; the answer may name {result.allowed_count} "
                  "entities of the constrained types (their KG neighbourhood).", soft_wrap=True)
    table = Table(show_lines=True)
    table.add_column("constraint off: the bundled model in this process, no KG processor", overflow="fold", ratio=1)
    table.add_column("constraint on: the same request to the service", overflow="fold", ratio=1)
    table.add_row(_one_line(result.off_text), _one_line(result.on_text))
    table.add_row(_outside(result.off_outside), _outside(result.on_outside))
    console.print(table)
    console.print(f"The service's audit record {result.audit_id}, kg_events:", soft_wrap=True)
    for event in result.blocked_events:
        blocked = ", ".join((event.get("data") or {}).get("blocked_entity_ids") or [])
        console.print(f"  token {event.get('position')}: blocked {blocked}", soft_wrap=True)
    if not result.blocked_events:
        console.print("  no \"blocked\" event: the constraint did not have to intervene this time")
    console.print("The constraint stops the model naming an entity outside the question's neighbourhood; it does not "
                  "make a 5M-parameter model fluent: the blocked name turns into other words.", soft_wrap=True)


def render_blocked(result: BlockedResult, console: Any) -> None:
    _heading(console, "2. A wrong answer, contradicted and blocked by the output gate")
    console.print(f"Question ({result.request.domain}, greedy decoding): {result.request.question}\n"
                  f"The model said:      {_one_line(result.model_output)}\n"
                  f"The client received: {_one_line(result.delivered) if result.delivered.strip() else '(nothing: the gate withheld the only sentence)'}\n"
                  f"Gate: {result.gate_action} (rule {', '.join(dict.fromkeys(result.rule_ids)) or '-'}); "
                  f"audit {result.audit_id}", soft_wrap=True)
    for claim in result.contradicted:
        console.print(f"  contradicted  {claim.get('kind')}  \"{claim.get('text')}\"", soft_wrap=True)
        for evidence in claim.get("evidence") or []:
            console.print(f"    {_evidence(evidence)}", soft_wrap=True)


def render_reaudit(result: ReauditResult, console: Any) -> None:
    from rich.table import Table

    _heading(console, "3. Another LLM's answers: imported, then re-audited under a new KG version")
    console.print(f"POST /v1/imports: {len(result.answers)} answers of \"{OTHER_MODEL}\" "
                  f"({result.answers_file}), import {result.import_id}, scored on arrival under finance KG "
                  f"{result.kg_before or 'packaged'}.\n"
                  f"The compliance team imports its sanctions list (`auditor kg import --format ofac-sdn`, "
                  f"{result.sdn_parties} fictional parties): finance KG {result.kg_before or 'packaged'} -> {result.kg_after}.\n"
                  f"POST /v1/reaudits {{\"import_id\": \"{result.import_id}\"}}: job {result.job_id}.", soft_wrap=True)
    table = Table(show_lines=True)
    for column in ("line", "question", "the other LLM's answer", "on import (s/c/u, action)", "after the re-audit"):
        table.add_column(column, overflow="fold")
    for answer in result.answers:
        after = _verdicts(answer.after) + ("  [changed]" if answer.changed else "")
        table.add_row(str(answer.line), answer.answer.prompt, answer.answer.output, _verdicts(answer.before), after)
    console.print(table)
    for answer in result.answers:
        if not answer.changed:
            continue
        for claim in answer.after.contradicted_claims:
            console.print(f"  line {answer.line} now contradicted: {claim.get('kind')} \"{claim.get('text')}\"", soft_wrap=True)
            for evidence in claim.get("evidence") or []:
                console.print(f"    {_evidence(evidence)}", soft_wrap=True)
    records = result.summary.get("records") or {}
    fer_before = (result.summary.get("fer_before") or {}).get("mean")
    fer_after = (result.summary.get("fer_after") or {}).get("mean")
    claim_changes = (result.summary.get("verdict_changes") or {}).get("total", 0)
    console.print(f"The job's summary: {records.get('done', 0)} of {records.get('total', 0)} records re-scored, mean FER "
                  f"{_fer(fer_before)} -> {_fer(fer_after)}, {claim_changes} verdict change(s) (a claim newly contradicted "
                  f"counts). Records whose current verdicts changed: {sum(a.changed for a in result.answers)}.",
                  soft_wrap=True)


def render_tamper(result: TamperResult, console: Any) -> None:
    _heading(console, "4. A tampered copy of the trail, caught by verify-chain")
    console.print(f"Copied the trail to {result.copy} and rewrote record {result.record_id}'s output there:\n"
                  f"  was: {_one_line(result.original_output)}\n"
                  f"  now: {_one_line(result.tampered_output)}", soft_wrap=True)
    for label, check in (("the copy", result.on_copy), ("the real trail", result.on_original)):
        console.print(f"$ {check.command}    # {label}\n{check.output}    (exit {check.exit_code})", soft_wrap=True)


def render_how_to_open(report: DemoReport, settings: Settings, console: Any, *, serving: bool) -> None:
    db = settings.database_url
    record = report.blocked.audit_id if report.blocked else (report.scripted[0].audit_id if report.scripted else "ID")
    console.print(
        "\nOpen the records (the audit store is a SQLite file):\n"
        f"  AUDITOR_DATABASE_URL={db} auditor audits show {record}\n"
        f"  AUDITOR_DATABASE_URL={db} auditor audits list --has-contradicted\n"
        f"  AUDITOR_DATABASE_URL={db} auditor audit verify-chain", soft_wrap=True)
    if serving:
        return
    console.print(
        "The compliance console (the demo's service has stopped; serve the same store and open it in a browser):\n"
        f"  AUDITOR_DATABASE_URL={db} auditor keys create --tenant default --role admin   # the console's login key\n"
        f"  AUDITOR_DATABASE_URL={db} auditor serve --port {settings.port}\n"
        f"  http://127.0.0.1:{settings.port}/console   then http://127.0.0.1:{settings.port}/console/records/{record}\n"
        "or run `auditor demo --serve`: it keeps the service up and prints a login key.", soft_wrap=True)


def _heading(console: Any, text: str) -> None:
    console.print()
    console.rule(f"[bold]{text}")


def _outside(mentions: list[Mention]) -> str:
    if not mentions:
        return "outside the allowed set: none"
    return "outside the allowed set: " + "; ".join(f"\"{m.text}\" ({', '.join(m.entity_ids)})" for m in mentions)


def _verdicts(verdicts: Verdicts) -> str:
    return f"{verdicts.counts()}, {verdicts.action}"


def _evidence(evidence: Any) -> str:
    if not isinstance(evidence, dict):
        return str(evidence)
    parts = [evidence.get("description") or "", evidence.get("source") or "", evidence.get("locator") or ""]
    if evidence.get("as_of"):
        parts.append(f"as of {evidence['as_of']}")
    return " | ".join(p for p in parts if p)


def _fer(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "(empty)"
