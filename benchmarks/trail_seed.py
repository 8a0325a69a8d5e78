"""Bulk-load a synthetic but realistic audit trail through the real append path (`benchmarks.trail_scale`).

Answers: the blind answer sets of `benchmarks/data/answers_*.jsonl` and `claims_*.jsonl` (written without
reading the validators) and the KG-derived question-answer corpus of `scripts/demo_corpus.py`, each judged
once by the real validators (`rules.verify`, the bundled packs): their claims, verdicts, evidence, FER and
gate actions are real. Records draw from that pool with a seeded RNG and vary what a real trail varies:
tenant (skewed: a few large customers), model, intent, sampling parameters, token counts, timing, and
whether the output was ours (live, through the gate: inline verdicts and gate decisions) or imported from
another model (no gate, its own timestamp up to 30 days before the import).

Time runs forward over `days` (default 90) as it would in a real trail: seq order is time order. Each
batch is one transaction of the real code: `append_batch` (records chained, outbox rows, view rows; COPY on
PostgreSQL), then `append_evaluations` + `verdicts.apply_evaluations` for their live scoring, and the
batch's outbox rows are marked dispatched (they were scored in that same transaction).

    python -m benchmarks.trail_seed --database-url URL --records 1000000
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update

from auditor.packs.registry import active_hashes, sync_from_dir
from auditor.packs.registry import pack_dir as packs_folder
from auditor.store.base import new_id
from auditor.store.database import ChainKey, Database
from auditor.trail import verdicts
from auditor.trail.access_log import CliOperator
from auditor.trail.models import AuditRecord, OutboxMessage
from auditor.trail.records import NewRecord, append_batch, append_evaluations

DATA = Path(__file__).parent / "data"
SEED_KEY = ChainKey(b"trail-scale-benchmark-hmac-key-0123456789", 100)
TENANTS = [f"tenant-{i:02d}" for i in range(20)]
TENANT_WEIGHTS = [30, 20, 12, 8, 5, 4, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0.5, 0.5]
MODELS = {"ours": ["qwen2.5-7b-instruct", "llama-3.1-8b-instruct", "mistral-7b-instruct"],
          "imported": ["other-llm-7b", "vendor-gpt-x"]}
INTENTS = {"medical": ["medical-diagnosis", "medical-dosing", "patient-info"],
           "legal": ["legal-advice", "legal-research"], "finance": ["fin-risk", "fin-kyc", "fin-research"]}
DOMAIN_WEIGHTS = {"medical": 0.4, "legal": 0.3, "finance": 0.3}
IMPORT_SHARE = 0.2


@dataclass(frozen=True, slots=True)
class Answer:
    """One pool answer, judged once by the real validators."""

    domain: str
    prompt: str
    output: str
    claims: list[dict[str, Any]]
    fer: float | None
    citation_confidence: float | None
    joint_score: float | None
    gate_action: str
    decisions: list[dict[str, Any]]
    kg_version: str | None
    rule_pack_hash: str
    evaluator_version: str


def answer_pool(limit_per_domain: int = 600) -> list[Answer]:
    """Every pool text judged by `rules.verify` (a minute or two; the KGs load once)."""
    from auditor.jobs.scoring import claims_with_gate
    from rules import EmptyTextError, verify

    pool = []
    for domain, prompt, output in _texts(limit_per_domain):
        try:
            report = verify(output, domain, prompt=prompt)
        except EmptyTextError:
            continue
        strongest = report.strongest_action()
        decisions = [{"stage": "output", "rule_id": a.rule_id, "action": a.on_fail,
                      "reason": f"{report.claims[a.claim_index].kind} claim is contradicted ({a.severity})",
                      "detail": {"claim_index": a.claim_index, "severity": a.severity}} for a in report.gate_actions]
        pool.append(Answer(domain, prompt, output, claims_with_gate(report), report.fer, report.citation_confidence,
                           report.joint_score, strongest.on_fail if strongest else "allow", decisions,
                           report.versions.kg, report.versions.rule_pack, report.versions.evaluator))
    return pool


def _texts(limit_per_domain: int) -> Iterator[tuple[str, str, str]]:
    counts: dict[str, int] = {}
    for domain in DOMAIN_WEIGHTS:
        for line in (DATA / f"answers_{domain}.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            counts[domain] = counts.get(domain, 0) + 1
            yield domain, row["prompt"], row["answer"]
        for line in (DATA / f"claims_{domain}.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            counts[domain] = counts.get(domain, 0) + 1
            yield domain, f"Is this right? {row['text'][:60]}", row["text"]
    from scripts.demo_corpus import domain_qas, load_domain_kgs

    kgs = load_domain_kgs(DOMAIN_WEIGHTS)
    for domain, kg in kgs.items():
        for qa in domain_qas(kg, seed=7)[: max(0, limit_per_domain - counts.get(domain, 0))]:
            yield domain, qa.questions[0], qa.answer


class TrailSeeder:
    """Appends `batch` records at a time, with their evaluations, to `database`'s trail."""

    def __init__(self, database: Database, pool: list[Answer], *, seed: int = 17, batch: int = 2000,
                 start: datetime | None = None, days: float = 90.0, total: int = 1_000_000) -> None:
        self.database, self.pool, self.batch = database, pool, batch
        self.rng = random.Random(seed)
        self.by_domain = {d: [a for a in pool if a.domain == d] for d in DOMAIN_WEIGHTS}
        self.clock = start or datetime.now(UTC) - timedelta(days=days)
        self.step = timedelta(days=days) / max(total, 1)

    def seed(self, count: int, *, progress: bool = False) -> float:
        """Append `count` records; returns records per second."""
        started = time.perf_counter()
        done = 0
        while done < count:
            size = min(self.batch, count - done)
            self._append(size)
            done += size
            if progress and done % (self.batch * 25) == 0:
                rate = done / (time.perf_counter() - started)
                print(f"  seeded {done:,} records ({rate:,.0f}/s)", file=sys.stderr, flush=True)
        return count / (time.perf_counter() - started)

    def _append(self, size: int) -> None:
        picks = [self._record() for _ in range(size)]
        with self.database.write_connection() as conn:
            stamps = [self._tick() for _ in picks]
            # One created_at per batch (as `append_batch` stamps); the batch's span is a few seconds of a trail.
            append_batch(conn, [record for record, _ in picks], key=self.database.chain_key, now=stamps[-1])
            evaluations = [self._evaluation(record, answer, stamps[-1] + timedelta(seconds=1))
                           for record, answer in picks if record.status == "completed"]
            append_evaluations(conn, evaluations, key=self.database.chain_key)
            verdicts.apply_evaluations(conn, [_Row(e) for e in evaluations], active_packs=active_hashes(conn))
            conn.execute(update(OutboxMessage).where(OutboxMessage.record_id.in_([e["record_id"] for e in evaluations]))
                         .values(dispatched_at=stamps[-1]))

    def _tick(self) -> datetime:
        self.clock += self.step * self.rng.uniform(0.5, 1.5)
        return self.clock

    def _record(self) -> tuple[NewRecord, Answer]:
        rng = self.rng
        domain = rng.choices(list(DOMAIN_WEIGHTS), weights=list(DOMAIN_WEIGHTS.values()))[0]
        answer = rng.choice(self.by_domain[domain])
        tenant = rng.choices(TENANTS, weights=TENANT_WEIGHTS)[0]
        if rng.random() < IMPORT_SHARE:
            produced = self.clock - timedelta(days=rng.uniform(0, 30))
            return NewRecord(
                tenant=tenant, status="completed", endpoint="import", domain=domain,
                model_id=rng.choice(MODELS["imported"]), content_mode="redacted", prompt=answer.prompt,
                output=answer.output, delivered_output=answer.output,
                details={"import_id": "bulk-seed", "line": rng.randrange(1, 10**6), "timestamp": produced.isoformat(),
                         "external_id": new_id()[:12], "metadata": None},
            ), answer
        blocked = answer.gate_action in ("block", "refuse")
        completion = max(8, len(answer.output) // 4)
        counts = {v: sum(1 for c in answer.claims if c.get("verdict") == v) for v in ("supported", "contradicted", "unverifiable")}
        return NewRecord(
            tenant=tenant, status="blocked" if blocked else "completed", key_id=f"key-{tenant}", request_id=new_id(),
            endpoint=rng.choice(("chat", "chat", "chat", "completions")), intent=rng.choice(INTENTS[domain]),
            domain=domain, model_id=rng.choice(MODELS["ours"]), checkpoint_hash="sha256:" + "ab" * 8,
            sampling_params={"temperature": rng.choice((0.0, 0.2, 0.7, 1.0)), "top_p": rng.choice((0.9, 1.0)),
                             "max_tokens": rng.choice((128, 256, 512)), "seed": rng.randrange(10**6), "stop": [],
                             "presence_penalty": 0.0, "frequency_penalty": 0.0, "logprobs": None,
                             "response_format": None},
            kg_version=answer.kg_version, rule_pack_hash=answer.rule_pack_hash, content_mode="redacted",
            prompt=answer.prompt, output=answer.output,
            delivered_output="[blocked by the output gate]" if blocked else answer.output,
            claims=answer.claims, prompt_tokens=len(answer.prompt) // 4 + 12, completion_tokens=completion,
            timings={"ttft_s": round(rng.uniform(0.05, 0.4), 4), "e2e_s": round(rng.uniform(0.5, 4.0), 4)},
            gate_decisions=answer.decisions, gate_action=answer.gate_action,
            n_supported=counts["supported"], n_contradicted=counts["contradicted"], n_unverifiable=counts["unverifiable"],
            fer=answer.fer, finish_reason="stop",
        ), answer

    def _evaluation(self, record: NewRecord, answer: Answer, at: datetime) -> dict[str, Any]:
        return {"record_id": record.id, "job_id": None, "evaluator_version": answer.evaluator_version,
                "kg_version": answer.kg_version, "rule_pack_hash": answer.rule_pack_hash, "status": "done",
                "failure_reason": None, "claims": answer.claims, "fer": answer.fer,
                "citation_confidence": answer.citation_confidence, "joint_score": answer.joint_score, "created_at": at}


class _Row:
    """An evaluation's values as `apply_evaluations` reads them (attribute access)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


def topup_seeder(database: Database, pool: list[Answer], count: int, *, seed: int = 17, batch: int = 2000,
                 now: datetime | None = None) -> TrailSeeder:
    """A seeder for `count` more records: on an empty store, 90 days of history up to now; otherwise records
    that follow the store's newest one and end about now (the trail grew since), so seq order stays time
    order however often the store is topped up."""
    now = now or datetime.now(UTC)
    with database.engine.connect() as conn:
        latest = conn.execute(select(func.max(AuditRecord.created_at))).scalar()
    if latest is None:
        return TrailSeeder(database, pool, seed=seed, batch=batch, start=now - timedelta(days=90), total=count)
    latest = latest.replace(tzinfo=UTC) if latest.tzinfo is None else latest   # SQLite drops the zone
    span = max(now - latest, count * timedelta(milliseconds=1))   # a store stamped ahead of now still grows forward
    return TrailSeeder(database, pool, seed=seed, batch=batch, start=latest, days=span / timedelta(days=1),
                       total=count)


def record_count(database: Database) -> int:
    with database.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(AuditRecord)).scalar_one()


def prepare(database: Database) -> None:
    """Migrate and register the bundled rule packs (so evaluations' packs are the active ones)."""
    database.upgrade(hmac_key=database.chain_key.hmac_key)
    sync_from_dir(database, packs_folder(None), actor=CliOperator(), force=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=2000)
    args = parser.parse_args(argv)
    database = Database(args.database_url, chain_key=SEED_KEY)
    prepare(database)
    already = record_count(database)
    pool = answer_pool()
    print(f"pool: {len(pool)} judged answers; store holds {already:,} records", file=sys.stderr)
    missing = max(0, args.records - already)
    seeder = topup_seeder(database, pool, max(missing, 1), batch=args.batch)
    rate = seeder.seed(missing, progress=True)
    print(json.dumps({"records": record_count(database), "records_per_s": round(rate, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
