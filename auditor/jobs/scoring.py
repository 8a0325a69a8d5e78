"""Score one audit record into one evaluation row: the service function below every task wrapper.

Idempotent: an evaluation is unique per (record, evaluator version, job) -- the table's unique
constraint for re-audit jobs, a partial unique index for live (job-less) scoring. A second delivery
of the same work finds the row and does nothing; two racing deliveries both compute, one insert wins.
The evaluation row and the caller's bookkeeping (`on_commit` hooks: outbox ack, re-audit item) are
written in one transaction, so "evaluated" and "marked done" can never disagree.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from auditor.jobs.domains import ScoringDomains, scoring_domains, shared_detector
from auditor.packs.registry import active_hashes
from auditor.packs.source import PackSource, PinnedPacks, StorePacks
from auditor.store.base import utcnow
from auditor.store.database import Database
from auditor.trail import verdicts
from auditor.trail.models import AuditRecord, Evaluation
from auditor.trail.records import seal_evaluations
from rules.warm_up import WARM_UP_TEXTS

GATE_ACTIONS = ("allow", "annotate", "redact", "block", "refuse")
_SEVERITIES = ("low", "medium", "high", "critical")


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
    status: str = "done"                  # done | not_applicable (the text belongs to no domain)
    details: dict[str, Any] | None = None # the domains scored under and how they were found (detected ones)
    reason: str | None = None             # why not applicable


class Evaluator(Protocol):
    version: str   # stored as evaluations.evaluator_version; part of the idempotency key

    def evaluate(self, *, text: str, domain: str | None, prompt: str | None) -> Scored: ...


class RulesEvaluator:
    """The production evaluator: `rules.verify` (claims, verdicts, evidence, FER, RC, joint score) under the
    rule pack its `packs` source names (the store's active pack; a job's pinned pack). Without a source
    (a bare library call) it uses the bundled packs."""

    def __init__(self, packs: PackSource | None = None) -> None:
        try:
            from rules import EmptyTextError, UnknownDomainError, verify
            from rules.validators import EVALUATOR_VERSION
        except ImportError as exc:
            raise EvaluatorUnavailable(f"rules.verify is not available ({exc})") from exc
        self._verify = verify
        self._unknown_domain, self._empty_text = UnknownDomainError, EmptyTextError
        self.version = EVALUATOR_VERSION
        self.packs = packs

    def use_packs(self, packs: PackSource) -> None:
        self.packs = packs

    def pinned(self, pins: Mapping[str, Mapping[str, str]]) -> RulesEvaluator:
        """This evaluator judging with a job's pinned packs (a shallow copy; the loaded validators are shared)."""
        if not pins or not isinstance(self.packs, StorePacks):
            return self
        clone = copy.copy(self)
        clone.packs = PinnedPacks(self.packs, pins)
        return clone

    def warm_up(self) -> None:
        """Load each domain's KG, pack and lazily imported registries now, not inside the first tasks."""
        for domain, text in WARM_UP_TEXTS.items():
            self._verify(text, domain, pack=self._pack(domain))

    def _pack(self, domain: str) -> Any:
        return self.packs.pack_for(domain) if self.packs is not None else None

    def evaluate(self, *, text: str, domain: str | None, prompt: str | None) -> Scored:
        if not domain:
            raise ScoringError("the record names no domain, so no rule pack applies")
        try:
            report = self._verify(text, domain, prompt=prompt, pack=self._pack(domain))
        except (self._unknown_domain, self._empty_text) as exc:   # the record's fault: retrying cannot help
            raise ScoringError(str(exc)) from exc
        strongest = report.strongest_action()
        return Scored(
            claims=claims_with_gate(report), fer=report.fer, citation_confidence=report.citation_confidence,
            joint_score=report.joint_score, gate_action=strongest.on_fail if strongest else "allow",
            kg_version=report.versions.kg, rule_pack_hash=report.versions.rule_pack,
        )


def evaluate_stored(evaluator: Evaluator, *, text: str, domain: str | None, prompt: str | None,
                    details: dict[str, Any] | None,
                    load_detector: Callable[[], Any] = shared_detector) -> Scored:
    """Score a stored output under every domain it belongs to (`auditor.jobs.domains`): the evaluator runs
    once per domain; text of no domain is "not_applicable", not a failure."""
    plan = scoring_domains(domain=domain, details=details, prompt=prompt, text=text, load_detector=load_detector)
    if plan.not_applicable is not None:
        return Scored(claims=[], fer=None, citation_confidence=None, joint_score=None, gate_action="allow",
                      status="not_applicable", details=plan.details, reason=plan.not_applicable)
    parts = [(name, evaluator.evaluate(text=text, domain=name, prompt=prompt)) for name in plan.domains]
    if plan.details is None:   # the domain was given: the evaluation is exactly what the evaluator said
        return parts[0][1]
    return merge_scored(parts, plan)


def merge_scored(parts: list[tuple[str, Scored]], plan: ScoringDomains) -> Scored:
    """One evaluation from several domains' (best first): claims tagged with their domain, FER over all of
    them, the weakest citation confidence, the strongest gate action; each domain's versions in `details`."""
    claims = [{**claim, "domain": name} for name, scored in parts for claim in scored.claims]
    verdicts = [claim.get("verdict") for claim in claims]
    verified = verdicts.count("supported") + verdicts.count("contradicted")
    fer = verdicts.count("contradicted") / verified if verified else None
    confidences = [s.citation_confidence for _, s in parts if s.citation_confidence is not None]
    citation_confidence = min(confidences) if confidences else None
    joint = (1 - fer) * citation_confidence if fer is not None and citation_confidence is not None else None
    if len(parts) == 1:
        fer, citation_confidence, joint = parts[0][1].fer, parts[0][1].citation_confidence, parts[0][1].joint_score
    details = dict(plan.details or {})
    details["versions"] = {name: {"kg": s.kg_version, "rule_pack": s.rule_pack_hash} for name, s in parts}
    top = parts[0][1]
    return Scored(claims=claims, fer=fer, citation_confidence=citation_confidence, joint_score=joint,
                  gate_action=max((s.gate_action for _, s in parts), key=GATE_ACTIONS.index),
                  kg_version=top.kg_version, rule_pack_hash=top.rule_pack_hash, details=details)


def claims_with_gate(report: Any) -> list[dict[str, Any]]:
    """The report's claims as stored, each contradicted claim annotated with the strongest rule it broke
    (`gate`: rule id, severity, on_fail), so stored verdicts say what the pack asked the gate to do."""
    claims = [claim.model_dump(mode="json") for claim in report.claims]
    ranked = sorted(report.gate_actions, key=lambda a: (GATE_ACTIONS.index(a.on_fail), _SEVERITIES.index(a.severity)))
    for action in ranked:   # strongest last: it wins
        claims[action.claim_index]["gate"] = {"rule_id": action.rule_id, "severity": action.severity,
                                              "on_fail": action.on_fail}
    return claims


def load_evaluator(spec: str = "rules", *, packs: PackSource | None = None) -> Evaluator:
    """"rules" (the default), or "package.module:attribute" naming an Evaluator class, factory or instance.
    `packs` is where the rules evaluator takes its packs from (ignored by other evaluators)."""
    if spec == "rules":
        return RulesEvaluator(packs)
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


def pinned(evaluator: Evaluator, pins: Mapping[str, Mapping[str, str]] | None) -> Evaluator:
    """The evaluator to run a job with: pinned to the job's packs when it judges with rule packs."""
    pin = getattr(evaluator, "pinned", None)
    return pin(pins) if pins and callable(pin) else evaluator


# A hook runs inside the transaction that writes (or finds) the evaluation. `scored` is None when
# the evaluation already existed or the record failed.
CommitHook = Callable[[Session, Evaluation, Scored | None], None]


@dataclass(slots=True)
class Outcome:
    evaluation_id: str
    status: str                 # done | failed | not_applicable
    created: bool               # False: an earlier delivery had already written it
    scored: Scored | None = None
    failure_reason: str | None = None


@dataclass(slots=True)
class ScoreRequest:
    record_id: str
    job_id: str | None = None
    on_commit: list[CommitHook] = field(default_factory=list)


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
        text, domain, prompt, details = ((record.output, record.domain, record.prompt, record.details) if record
                                         else (None, None, None, None))
    if existing is not None:
        return _acknowledge_existing(database, request, evaluator.version)
    try:
        if record is None:
            raise ScoringError(f"no audit record {request.record_id!r}")
        if text is None:
            raise ScoringError("the record holds no output text (hash-only content mode or purged)")
        scored = evaluate_stored(evaluator, text=text, domain=domain, prompt=prompt, details=details)
    except ScoringError as exc:   # anything else (a KG file missing, the database) may heal: caller retries
        return record_failure(database, request, evaluator_version=evaluator.version, reason=failure_text(exc))
    return _insert(database, request, evaluator.version, scored)


def failure_text(exc: BaseException) -> str:
    """A failure reason that names the error class (re-audit summaries count failures by it)."""
    return f"{type(exc).__name__}: {exc}"


def record_failure(database: Database, request: ScoreRequest, *, evaluator_version: str, reason: str) -> Outcome:
    """End the (record, version, job) slot as failed with its reason (visible with the record's evaluations)."""
    return _insert(database, request, evaluator_version, None, failure_reason=reason[:2000])


def _new_evaluation(request: ScoreRequest, evaluator_version: str, scored: Scored | None,
                    failure_reason: str | None) -> Evaluation:
    return Evaluation(
        record_id=request.record_id, job_id=request.job_id, evaluator_version=evaluator_version,
        status=scored.status if scored else "failed", failure_reason=failure_reason or (scored.reason if scored else None),
        details=scored.details if scored else None,
        claims=scored.claims if scored else None, fer=scored.fer if scored else None,
        citation_confidence=scored.citation_confidence if scored else None,
        joint_score=scored.joint_score if scored else None,
        kg_version=scored.kg_version if scored else None, rule_pack_hash=scored.rule_pack_hash if scored else None,
        created_at=utcnow(),
    )


def _insert(database: Database, request: ScoreRequest, evaluator_version: str, scored: Scored | None,
            *, failure_reason: str | None = None) -> Outcome:
    evaluation = _new_evaluation(request, evaluator_version, scored, failure_reason)
    try:
        with database.session(write=True) as session:
            seal_evaluations(session.connection(), [evaluation], database.chain_key)
            session.add(evaluation)
            session.flush()   # the unique index fires here, before any hook runs
            _update_view(session, [evaluation])
            for hook in request.on_commit:
                hook(session, evaluation, scored)
    except IntegrityError:
        # Another delivery of the same work committed first: theirs is the evaluation.
        return _acknowledge_existing(database, request, evaluator_version)
    return Outcome(evaluation.id, evaluation.status, True, scored, failure_reason)


def _update_view(session: Session, evaluations: list[Evaluation]) -> None:
    """Move the current-verdict view in the evaluations' own transaction."""
    conn = session.connection()
    verdicts.apply_evaluations(conn, evaluations, active_packs=active_hashes(conn))


def _acknowledge_existing(database: Database, request: ScoreRequest, evaluator_version: str) -> Outcome:
    with database.session(write=True) as session:
        evaluation = find_evaluation(session, record_id=request.record_id, evaluator_version=evaluator_version,
                                     job_id=request.job_id)
        if evaluation is None:
            raise IntegrityError("evaluation insert conflicted but no evaluation exists", None, Exception())
        for hook in request.on_commit:
            hook(session, evaluation, None)
    return Outcome(evaluation.id, evaluation.status, False, None, evaluation.failure_reason)


@dataclass(slots=True)
class BatchResult:
    outcomes: list[Outcome] = field(default_factory=list)
    errors: list[tuple[ScoreRequest, Exception]] = field(default_factory=list)   # caller retries these


def score_batch(
    database: Database, evaluator: Evaluator, requests: list[ScoreRequest], *,
    fatal: tuple[type[BaseException], ...] = (), before_each: Callable[[str], None] | None = None,
    on_batch_commit: Callable[[Session], None] | None = None,
) -> BatchResult:
    """`score_record` for many records, with one read and one commit for the whole batch.

    Same guarantees: a record already evaluated is only acknowledged; permanent problems end as failed
    rows; if a concurrent delivery wins any insert, the batch settles record by record. Exceptions
    from the evaluator are returned in `errors` (nothing written for those), except `fatal` ones."""
    result = BatchResult()
    if not requests:
        return result
    job_ids = {r.job_id for r in requests}
    assert len(job_ids) == 1, "a batch scores for one job"
    job_id = job_ids.pop()
    record_ids = [r.record_id for r in requests]
    job_match = Evaluation.job_id.is_(None) if job_id is None else Evaluation.job_id == job_id
    with database.session() as session:
        existing = set(session.execute(select(Evaluation.record_id).where(
            Evaluation.record_id.in_(record_ids), Evaluation.evaluator_version == evaluator.version, job_match,
        )).scalars())
        records = {row.id: row for row in session.execute(
            select(AuditRecord.id, AuditRecord.output, AuditRecord.domain, AuditRecord.prompt, AuditRecord.details)
            .where(AuditRecord.id.in_(record_ids)))}
    ready: list[tuple[ScoreRequest, Evaluation, Scored | None]] = []
    already: list[ScoreRequest] = []
    for request in requests:
        if request.record_id in existing:
            already.append(request)
            continue
        if before_each is not None:
            before_each(request.record_id)
        record = records.get(request.record_id)
        try:
            if record is None:
                raise ScoringError(f"no audit record {request.record_id!r}")
            if record.output is None:
                raise ScoringError("the record holds no output text (hash-only content mode or purged)")
            scored: Scored | None = evaluate_stored(evaluator, text=record.output, domain=record.domain,
                                                    prompt=record.prompt, details=record.details)
            failure = None
        except fatal:
            raise
        except ScoringError as exc:
            scored, failure = None, failure_text(exc)[:2000]
        except Exception as exc:
            result.errors.append((request, exc))
            continue
        ready.append((request, _new_evaluation(request, evaluator.version, scored, failure), scored))
    try:
        with database.session(write=True) as session:
            seal_evaluations(session.connection(), [evaluation for _, evaluation, _ in ready], database.chain_key)
            session.add_all([evaluation for _, evaluation, _ in ready])
            session.flush()
            _update_view(session, [evaluation for _, evaluation, _ in ready])
            for request, evaluation, scored in ready:
                for hook in request.on_commit:
                    hook(session, evaluation, scored)
            if on_batch_commit is not None:
                on_batch_commit(session)
        result.outcomes += [Outcome(e.id, e.status, True, scored, e.failure_reason) for _, e, scored in ready]
    except IntegrityError:
        result.outcomes += [_insert(database, request, evaluator.version, scored, failure_reason=e.failure_reason)
                            for request, e, scored in ready]
    result.outcomes += [_acknowledge_existing(database, request, evaluator.version) for request in already]
    return result


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
