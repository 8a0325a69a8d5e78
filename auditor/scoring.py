"""Score one audit record into one evaluation row: the service function below every task wrapper.

Idempotent: an evaluation is unique per (record, evaluator version, job) -- the table's unique
constraint for re-audit jobs, a partial unique index for live (job-less) scoring. A second delivery
of the same work finds the row and does nothing; two racing deliveries both compute, one insert wins.
The evaluation row and the caller's bookkeeping (`on_commit` hooks: outbox ack, re-audit item) are
written in one transaction, so "evaluated" and "marked done" can never disagree.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from auditor.db import Database
from auditor.models import AuditRecord, Evaluation, utcnow

GATE_ACTIONS = ("allow", "annotate", "redact", "block", "refuse")


class ScoringError(ValueError):
    """A record that cannot be scored however often it is retried (no text, unknown domain, ...)."""


class EvaluatorUnavailable(RuntimeError):
    """The configured evaluator cannot be loaded."""


@dataclass(frozen=True, slots=True)
class Scored:
    """What an evaluator says about one output."""

    claims: list[dict[str, Any]]          # each {text, span, kind, verdict, confidence, evidence, rule_ids}
    fer: float | None
    citation_confidence: float | None
    joint_score: float | None
    gate_action: str                      # the output-gate action these verdicts imply (allow ... refuse)
    kg_version: str | None = None
    rule_pack_hash: str | None = None


class Evaluator(Protocol):
    version: str   # stored as evaluations.evaluator_version; part of the idempotency key

    def evaluate(self, *, text: str, domain: str | None, prompt: str | None) -> Scored: ...


class RulesEvaluator:
    """The production evaluator: `rules.verify` (claims, verdicts, evidence, FER, RC, joint score)."""

    def __init__(self) -> None:
        try:
            from rules import EmptyTextError, UnknownDomainError, verify
            from rules.validators import EVALUATOR_VERSION
        except ImportError as exc:
            raise EvaluatorUnavailable(f"rules.verify is not available ({exc})") from exc
        self._verify = verify
        self._unknown_domain, self._empty_text = UnknownDomainError, EmptyTextError
        self.version = EVALUATOR_VERSION

    def warm_up(self, domains: tuple[str, ...] = ("finance", "medical", "legal")) -> None:
        """Load each domain's KG and pack now (seconds to minutes), not inside the first task."""
        for domain in domains:
            self._verify("Warm-up.", domain)

    def evaluate(self, *, text: str, domain: str | None, prompt: str | None) -> Scored:
        if not domain:
            raise ScoringError("the record names no domain, so no rule pack applies")
        try:
            report = self._verify(text, domain, prompt=prompt)
        except (self._unknown_domain, self._empty_text) as exc:   # the record's fault: retrying cannot help
            raise ScoringError(str(exc)) from exc
        strongest = report.strongest_action()
        return Scored(
            claims=[claim.model_dump(mode="json") for claim in report.claims],
            fer=report.fer, citation_confidence=report.citation_confidence, joint_score=report.joint_score,
            gate_action=strongest.on_fail if strongest else "allow",
            kg_version=report.versions.kg, rule_pack_hash=report.versions.rule_pack,
        )


def load_evaluator(spec: str = "rules") -> Evaluator:
    """"rules" (the default), or "package.module:attribute" naming an Evaluator class, factory or instance."""
    if spec == "rules":
        return RulesEvaluator()
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise EvaluatorUnavailable(f"evaluator {spec!r} is neither 'rules' nor 'module:attribute'")
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise EvaluatorUnavailable(f"cannot load evaluator {spec!r}: {exc}") from exc
    # A class or factory is called; an instance (anything with a bound `evaluate`) is used as is.
    is_instance = hasattr(target, "evaluate") and not isinstance(target, type)
    return target if is_instance else target()


# A hook runs inside the transaction that writes (or finds) the evaluation. `scored` is None when
# the evaluation already existed or the record failed.
CommitHook = Callable[[Session, Evaluation, Scored | None], None]


@dataclass(slots=True)
class Outcome:
    evaluation_id: str
    status: str                 # done | failed
    created: bool               # False: an earlier delivery had already written it
    scored: Scored | None = None
    failure_reason: str | None = None


@dataclass(slots=True)
class ScoreRequest:
    record_id: str
    job_id: str | None = None
    on_commit: list[CommitHook] = field(default_factory=list)


@contextmanager
def write_session(database: Database) -> Iterator[Session]:
    """A session in a write transaction (BEGIN IMMEDIATE on SQLite, so concurrent writers queue)."""
    with database.write_connection() as conn, Session(bind=conn, expire_on_commit=False) as session:
        yield session
        session.flush()


def find_evaluation(session: Session, *, record_id: str, evaluator_version: str, job_id: str | None) -> Evaluation | None:
    job_match = Evaluation.job_id.is_(None) if job_id is None else Evaluation.job_id == job_id
    query = select(Evaluation).where(
        Evaluation.record_id == record_id, Evaluation.evaluator_version == evaluator_version, job_match)
    return session.execute(query).scalar()


def score_record(database: Database, evaluator: Evaluator, request: ScoreRequest) -> Outcome:
    """Evaluate the record once for (evaluator.version, job). Permanent problems end as a failed row;
    anything else (database, timeout) propagates so the caller can retry."""
    with database.session() as session:
        existing = find_evaluation(session, record_id=request.record_id, evaluator_version=evaluator.version,
                                   job_id=request.job_id)
        record = None if existing else session.get(AuditRecord, request.record_id)
        text, domain, prompt = (record.output, record.domain, record.prompt) if record else (None, None, None)
    if existing is not None:
        return _acknowledge_existing(database, request, evaluator.version)
    try:
        if record is None:
            raise ScoringError(f"no audit record {request.record_id!r}")
        if text is None:
            raise ScoringError("the record holds no output text (hash-only content mode or purged)")
        scored = evaluator.evaluate(text=text, domain=domain, prompt=prompt)
    except ScoringError as exc:   # anything else (a KG file missing, the database) may heal: caller retries
        return record_failure(database, request, evaluator_version=evaluator.version, reason=str(exc))
    return _insert(database, request, evaluator.version, scored)


def record_failure(database: Database, request: ScoreRequest, *, evaluator_version: str, reason: str) -> Outcome:
    """End the (record, version, job) slot as failed with its reason (visible with the record's evaluations)."""
    return _insert(database, request, evaluator_version, None, failure_reason=reason[:2000])


def _insert(database: Database, request: ScoreRequest, evaluator_version: str, scored: Scored | None,
            *, failure_reason: str | None = None) -> Outcome:
    evaluation = Evaluation(
        record_id=request.record_id, job_id=request.job_id, evaluator_version=evaluator_version,
        status="done" if scored else "failed", failure_reason=failure_reason,
        claims=scored.claims if scored else None, fer=scored.fer if scored else None,
        citation_confidence=scored.citation_confidence if scored else None,
        joint_score=scored.joint_score if scored else None,
        kg_version=scored.kg_version if scored else None, rule_pack_hash=scored.rule_pack_hash if scored else None,
        created_at=utcnow(),
    )
    try:
        with write_session(database) as session:
            session.add(evaluation)
            session.flush()   # the unique index fires here, before any hook runs
            for hook in request.on_commit:
                hook(session, evaluation, scored)
    except IntegrityError:
        # Another delivery of the same work committed first: theirs is the evaluation.
        return _acknowledge_existing(database, request, evaluator_version)
    return Outcome(evaluation.id, evaluation.status, True, scored, failure_reason)


def _acknowledge_existing(database: Database, request: ScoreRequest, evaluator_version: str) -> Outcome:
    with write_session(database) as session:
        evaluation = find_evaluation(session, record_id=request.record_id, evaluator_version=evaluator_version,
                                     job_id=request.job_id)
        if evaluation is None:
            raise IntegrityError("evaluation insert conflicted but no evaluation exists", None, Exception())
        for hook in request.on_commit:
            hook(session, evaluation, None)
    return Outcome(evaluation.id, evaluation.status, False, None, evaluation.failure_reason)


_versions: dict[str, str] = {}


def evaluator_version(spec: str = "rules") -> str:
    """The version an evaluator spec scores under, without keeping the evaluator (cached per spec)."""
    if spec not in _versions:
        if spec == "rules":
            try:
                from rules.validators import EVALUATOR_VERSION
            except ImportError as exc:
                raise EvaluatorUnavailable(f"rules validators are not available ({exc})") from exc
            _versions[spec] = EVALUATOR_VERSION
        else:
            _versions[spec] = load_evaluator(spec).version
    return _versions[spec]
