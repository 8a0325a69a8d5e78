"""Scene 3: another LLM's answers, imported with their wrong facts, then re-audited after a KG change.

1. `POST /v1/imports`: a batch of answers some other LLM gave last week (JSONL, written to the demo folder
   so `auditor import` can read the same file), scored on arrival like our own outputs.
2. The compliance team imports its sanctions screening list (`auditor kg import --format ofac-sdn`): a new
   finance KG version, served at once (`POST /v1/kg/reload`).
3. `POST /v1/reaudits {"import_id": ...}`: the same answers judged again under the new version. An answer
   that cleared a party the list names now has a contradicted claim: its verdict changes.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from auditor.demo.service import DemoError
from auditor.kg.versions import import_file
from auditor.settings import Settings
from auditor.store.database import Database

SDN_FILE = Path(__file__).parent / "data" / "sdn-demo.csv"
ANSWERS_NAME = "other-llm-answers.jsonl"
OTHER_MODEL = "other-llm-v2"


@dataclass(frozen=True, slots=True)
class ImportedAnswer:
    prompt: str
    output: str


# What "another LLM" answered; the parties are the fictional ones of data/sdn-demo.csv.
ANSWERS: tuple[ImportedAnswer, ...] = (
    ImportedAnswer("Can we wire USD 2m to Halvard Trade Finance LLC?",
                   "Yes. Halvard Trade Finance LLC is not subject to any U.S. sanctions, so the transfer can go ahead."),
    ImportedAnswer("What amount triggers a Currency Transaction Report?",
                   "A Currency Transaction Report is required for cash transactions of more than $5,000."),
    ImportedAnswer("Is Iran on the FATF call for action list?",
                   "No, Iran is not on the FATF call for action list."),
    ImportedAnswer("What currency does Japan use?", "Japan uses the Japanese yen (JPY)."),
)


@dataclass(frozen=True, slots=True)
class Verdicts:
    """A record's current verdicts as `GET /v1/audits/{id}` shows them."""
    supported: int
    contradicted: int
    unverifiable: int
    fer: float | None
    action: str            # what the verdicts ask the gate to do
    kg_version: str | None
    contradicted_claims: list[dict[str, Any]]

    @classmethod
    def of(cls, record: dict[str, Any]) -> Verdicts:
        current = record.get("current") or {}
        claims = current.get("claims") or []
        return cls(current.get("n_supported", 0), current.get("n_contradicted", 0), current.get("n_unverifiable", 0),
                   current.get("fer"), current.get("verdict_action") or "allow", current.get("kg_version"),
                   [c for c in claims if isinstance(c, dict) and c.get("verdict") == "contradicted"])

    def counts(self) -> str:
        return f"{self.supported}/{self.contradicted}/{self.unverifiable}"


@dataclass(frozen=True, slots=True)
class ReauditedAnswer:
    line: int
    record_id: str
    answer: ImportedAnswer
    before: Verdicts
    after: Verdicts

    @property
    def changed(self) -> bool:
        return (self.before.counts(), self.before.action) != (self.after.counts(), self.after.action)


@dataclass(frozen=True, slots=True)
class ReauditResult:
    import_id: str
    answers_file: Path
    kg_before: str | None
    kg_after: str
    sdn_parties: int
    job_id: str
    summary: dict[str, Any]
    answers: list[ReauditedAnswer]


def import_and_reaudit(client: httpx.Client, settings: Settings, workdir: Path, *,
                       timeout: float = 300.0) -> ReauditResult:
    answers_file = write_answers(workdir)
    response = client.post("/v1/imports", params={"filename": answers_file.name, "strict": "true"},
                           content=answers_file.read_bytes())
    _expect(response, 201, "the import")
    import_id = response.json()["id"]
    record_ids = _import_records(settings, import_id)
    before = _wait_for_scores(client, record_ids, timeout=timeout)

    database = Database.from_settings(settings)
    try:
        from knowledge_graphs import packaged_kg

        imported = import_file(database, packaged_kg("finance"), fmt="ofac-sdn", path=SDN_FILE,
                               as_of=datetime.now(UTC).date().isoformat(), imported_by="auditor demo")
    finally:
        database.dispose()
    _expect(client.post("/v1/kg/reload"), 200, "the KG reload")

    response = client.post("/v1/reaudits", json={"import_id": import_id})
    _expect(response, 202, "the re-audit")
    job = _wait_for_job(client, response.json()["id"], timeout=timeout)
    after = {record_id: Verdicts.of(_record(client, record_id)) for record_id in record_ids.values()}
    answers = [ReauditedAnswer(line, record_id, ANSWERS[line - 1], before[record_id], after[record_id])
               for line, record_id in sorted(record_ids.items())]
    return ReauditResult(import_id, answers_file, next(iter(before.values())).kg_version, imported.version.version_hash,
                         imported.rows, job["id"], job["summary"] or {}, answers)


def write_answers(workdir: Path) -> Path:
    """The batch as `auditor import` reads it, dated two days ago (the time the other LLM answered)."""
    answered = (datetime.now(UTC) - timedelta(days=2)).replace(microsecond=0).isoformat()
    path = workdir / ANSWERS_NAME
    path.write_text("".join(json.dumps({"prompt": a.prompt, "output": a.output, "domain": "finance",
                                        "model": OTHER_MODEL, "timestamp": answered}) + "\n" for a in ANSWERS),
                    encoding="utf-8")
    return path


def _import_records(settings: Settings, import_id: str) -> dict[int, str]:
    """line -> record id of an import."""
    from sqlalchemy import select

    from auditor.jobs.models import ImportedOutput

    database = Database.from_settings(settings)
    try:
        with database.session() as session:
            rows = session.execute(select(ImportedOutput.line, ImportedOutput.record_id)
                                   .where(ImportedOutput.import_id == import_id)).all()
    finally:
        database.dispose()
    return {row.line: row.record_id for row in rows}


def _wait_for_scores(client: httpx.Client, record_ids: dict[int, str], *, timeout: float) -> dict[str, Verdicts]:
    """Each imported record's verdicts once live scoring (the outbox) has evaluated it."""
    deadline = time.monotonic() + timeout
    while True:
        records = {record_id: _record(client, record_id) for record_id in record_ids.values()}
        if all((r.get("current") or {}).get("source") == "evaluation" for r in records.values()):
            return {record_id: Verdicts.of(r) for record_id, r in records.items()}
        if time.monotonic() > deadline:
            raise DemoError(f"the imported answers were not scored within {timeout:.0f} s")
        time.sleep(0.5)


def _wait_for_job(client: httpx.Client, job_id: str, *, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        response = client.get(f"/v1/reaudits/{job_id}")
        _expect(response, 200, "the re-audit job")
        job: dict[str, Any] = response.json()
        if job["finished_at"] is not None:
            return job
        if time.monotonic() > deadline:
            raise DemoError(f"re-audit job {job_id} did not finish within {timeout:.0f} s")
        time.sleep(0.5)


def _record(client: httpx.Client, record_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/audits/{record_id}")
    _expect(response, 200, f"record {record_id}")
    body: dict[str, Any] = response.json()
    return body


def _expect(response: httpx.Response, status: int, what: str) -> None:
    if response.status_code != status:
        raise DemoError(f"{what} failed with HTTP {response.status_code}: {response.text[:300]}")
