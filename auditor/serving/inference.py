"""The audited inference path: input gate -> KG linking -> engine -> output gate -> audit record.

Nothing leaves without a committed record. Non-streaming: the response is built only after the record's
commit. Streaming: the stream's opening row is committed before any piece is released (its commit overlaps
the start of generation; a store that takes no writes fails the request with 503 before the first byte);
each sentence passes the output gate and is committed as a segment before it is sent
(`auditor.trail.segments`); the chained record, which takes the segments over, is committed before the
last sentence, the final chunk and `[DONE]` (the record covers the last sentence, so it needs no segment
commit of its own). If a write fails, the client gets
an error event and nothing more, and the committed segments are recovered into an "error" record. A
client that disconnects mid-stream still gets its request recorded, with status "error". So does a request
whose engine died under it (the engine-core process was killed or crashed): it is recorded as failed and
the client gets 503 (`EngineUnavailable`), or an error event if its stream had begun.

The engine streams deltas (`output_kind="delta"`): each output holds only the new tokens and text.

The backend is the local engine or an OpenAI-compatible upstream (`auditor.serving.registry`): the same
gates, validators and record apply; an upstream's record names it and says its decoding was not KG-
constrained, and an upstream that fails (`UpstreamError`) is recorded as an error with what was delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from auditor.auth.principal import Principal
from auditor.gate.gate import InputGateResult, OutputGate, Verifier, check_input, strongest
from auditor.gate.pii import redact_pii
from auditor.gate.tool_policy import load_tool_policies
from auditor.logs import bind
from auditor.serving.cost import (
    DeliveredRequests,
    PriceTable,
    TemplateTokens,
    Usage,
    excluded_reason,
    usage_for,
)
from auditor.serving.domains import DomainRequired, DomainResolution, resolve_request_domain
from auditor.serving.knowledge import KgConstraint, Knowledge
from auditor.serving.metrics import RequestObservation, ServiceMetrics
from auditor.serving.refusals import context_length_message, input_refusal, output_refusal, withheld_rules
from auditor.serving.registry import Backend, LocalBackend, ModelRoute
from auditor.serving.surface import RequestSurface, apply_tool_decisions, parses_as_json, redacted_message
from auditor.serving.traffic import LiveTraffic
from auditor.serving.upstream import UpstreamError
from auditor.settings import Settings
from auditor.store.database import Database
from auditor.tenants.service import detection_mode
from auditor.trail.chain import sha256_text
from auditor.trail.group_commit import GroupCommitter
from auditor.trail.records import NewRecord
from auditor.trail.segments import ChainedRecordWrite, StreamOpening, insert_opening, insert_segment
from engine.errors import ContextLengthExceeded, EngineDeadError
from engine.outputs import RequestOutput, TokenLogprob
from engine.sampling_params import InvalidRequestError, SamplingParams
from knowledge_graphs.detection import DomainDetector

logger = logging.getLogger("auditor.inference")


class AuditUnavailable(Exception):
    """The audit record could not be committed: the request fails closed (503, no output)."""


class EngineUnavailable(Exception):
    """The engine failed under the request or is restarting: 503, and the request is recorded as failed."""


class BadRequest(ValueError):
    """A request the engine or the service refuses (400)."""

    def __init__(self, message: str, *, param: str | None = None, code: str = "invalid_parameter") -> None:
        super().__init__(message)
        self.param, self.code = param, code


@dataclass(slots=True)
class RequestContext:
    principal: Principal
    endpoint: str                    # chat | completions
    request_id: str
    intent: str | None
    domain: str | None
    client_request_id: bool = False  # the request id came from the client (X-Request-Id): retries can be told


@dataclass(slots=True)
class Prepared:
    audit_id: str
    context: RequestContext
    prompt: Any                      # what the backend takes: text (chat template applied) or an upstream's messages
    stored_prompt: str               # what the record stores (raw or PII-redacted per content mode)
    gate_text: str                   # user-supplied text, for the output validators' context
    params: SamplingParams
    input_gate: InputGateResult
    kg: KgConstraint | None
    content_mode: str
    backend: Backend
    resolution: DomainResolution
    details: dict[str, Any] = field(default_factory=dict)   # goes into the record's (hashed) details
    started: float = field(default_factory=time.perf_counter)
    surface: RequestSurface = field(default_factory=RequestSurface)
    prefilled: anyio.Event | None = None   # set when the engine's first output arrives (n > 1 waits on it)
    template_tokens: int = 0         # prompt tokens the chat template adds (auditor.serving.cost)


@dataclass(slots=True)
class Outcome:
    audit_id: str
    text: str                        # what the client receives
    finish_reason: str
    status: str                      # completed | refused | blocked | error
    prompt_tokens: int
    completion_tokens: int
    gate_action: str
    claim_counts: dict[str, int]
    fer: float | None
    annotations: list[str]
    logprobs: list[TokenLogprob] | None = None
    tool_calls: list[dict[str, Any]] | None = None   # OpenAI shape; `text` is then the content beside them
    audit_extras: dict[str, Any] = field(default_factory=dict)
    contradicted: list[dict[str, Any]] = field(default_factory=list)   # the claims a regeneration must avoid
    domain: dict[str, Any] | None = None     # {"name", "source", "verified_under", "scores"}
    refusal: str | None = None       # what the gate refused or withheld, and why (`auditor.serving.refusals`)

    def audit_summary(self) -> dict[str, Any]:
        return {"gate_action": self.gate_action, "claims": self.claim_counts, "fer": self.fer,
                "annotations": self.annotations, "domain": self.domain, **self.audit_extras}


class _OpeningWrite:
    """A stream's opening-row commit, started early and awaited before anything that depends on it."""

    def __init__(self, write: Awaitable[None] | None) -> None:
        self._task = asyncio.ensure_future(write) if write is not None else None

    async def committed(self) -> None:
        """Returns once the row is committed; raises AuditUnavailable if it could not be."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def settled(self) -> None:
        """Returns once the write has ended either way (a failure record must not overtake it)."""
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._task)


@dataclass(slots=True)
class _Generation:
    """What the engine produced for one request, accumulated across outputs."""

    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    logprobs: list[TokenLogprob] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, Any] = field(default_factory=dict)
    first_release: float | None = None
    token_gaps: list[float] = field(default_factory=list)   # the engine's inter-token latencies (final stats)
    engine_seconds: float = 0.0
    done: bool = False               # the backend's last output has been absorbed
    violations: list[str] | None = None   # the KG check of the whole output, once `checked`
    checked: bool = False

    def absorb(self, out: RequestOutput) -> None:
        """Add one delta output (`output_kind="delta"`)."""
        self.text += out.new_text
        self.finish_reason = out.finish_reason or self.finish_reason
        self.prompt_tokens = out.stats.num_prompt_tokens or len(out.prompt_token_ids)
        self.completion_tokens = out.stats.num_generated_tokens or self.completion_tokens + len(out.new_token_ids)
        if out.logprobs:
            self.logprobs.extend(out.logprobs)
        self.events.extend(asdict(event) for event in out.events)
        stats = out.stats
        self.timings = {"queue_s": stats.request_queue_time_seconds, "ttft_s": stats.time_to_first_token_seconds,
                        "engine_e2e_s": stats.e2e_request_latency_seconds, "cached_tokens": stats.num_cached_tokens,
                        "preemptions": stats.num_preemptions}
        if out.finished:
            self.done = True
            self.token_gaps = list(stats.inter_token_latency_seconds)
            self.engine_seconds = stats.engine_time_seconds
            self.timings["engine_s"] = round(stats.engine_time_seconds, 6)


class InferenceService:
    def __init__(self, *, engine: Any, database: Database, settings: Settings, metrics: ServiceMetrics,
                 verifier: Verifier, knowledge: Knowledge, committer: GroupCommitter | None = None,
                 detector: DomainDetector | None = None) -> None:
        """`detector`: detects the domain of requests that name none (None: such requests go unverified)."""
        self.engine = engine
        self.detector = detector
        self.database = database
        # every request-path write (stream openings, segments, records) goes through one group committer
        self.committer = committer or GroupCommitter(database, timeout_s=settings.store_timeout_s)
        self.settings = settings
        self.metrics = metrics
        self.verifier = verifier
        self.knowledge = knowledge
        self.tool_policies = load_tool_policies(settings.tool_policy_file)
        self.local = LocalBackend(engine) if engine is not None else None
        self.prices = PriceTable.load(settings.price_table)
        # Template tokens are counted for the local engine's template only (an upstream's is its own).
        self.template_tokens = TemplateTokens(engine.tokenizer) if engine is not None else None
        self.delivered = DeliveredRequests()
        self.traffic = LiveTraffic()   # background work in this process yields to requests in flight

    # -- preparation -----------------------------------------------------------------------------
    def prepare(self, context: RequestContext, *, messages: list[dict[str, Any]] | None = None,
                prompt: str | None = None, params: SamplingParams, surface: RequestSurface | None = None,
                route: ModelRoute | None = None) -> Prepared:
        """Render the prompt, run the input gate, link KG entities; raise BadRequest for unusable input.
        `route` (from the model registry) says which backend generates; None is the local engine."""
        surface = surface or RequestSurface()
        backend = route.backend if route is not None else self.local
        counter = self.template_tokens if backend is self.local else None
        try:
            params.validate()
        except InvalidRequestError as exc:
            raise BadRequest(str(exc)) from exc
        if messages is not None:
            try:
                rendered = backend.render(messages, **surface.template_kwargs())
            except InvalidRequestError as exc:
                raise BadRequest(str(exc), param="messages") from exc
            template_tokens = counter.for_messages(messages) if counter is not None else 0
            user_text = "\n".join(m["content"] for m in messages if m["role"] in ("user", "tool"))
            raw_stored = json.dumps(messages, ensure_ascii=False)
            redacted_stored = json.dumps([redacted_message(m) for m in messages], ensure_ascii=False)
        else:
            rendered = user_text = raw_stored = prompt or ""
            redacted_stored = redact_pii(rendered)[0]
            template_tokens = counter.for_prompt() if counter is not None else 0
        resolution = self._resolve_domain(context, user_text)
        domain = resolution.domain
        gate = check_input(user_text, intent=context.intent, annotate_score=self.settings.injection_annotate_score,
                           refuse_score=self.settings.injection_refuse_score,
                           detected_domains=resolution.verified_under if resolution.detecting else ())
        gate.decisions.extend(surface.check_tool_results(self.verifier, domain=domain))
        # Only the local engine can mask logits; an upstream's record says its decoding was not constrained.
        kg = self.knowledge.constraint_for(domain, user_text) if domain and backend.kg_constrained else None
        if kg is not None and kg.applied and self.settings.kg_constraint:
            params.extra_args.update(kg.extra_args())
        mode = self.settings.content_mode_for(domain)
        audit_id = str(uuid.uuid4())
        bind(audit_id=audit_id, request_id=context.request_id)   # every later line of this request names it
        return Prepared(
            audit_id=audit_id, context=context, prompt=rendered,
            stored_prompt=redacted_stored if mode == "redacted" else raw_stored, gate_text=user_text,
            params=params, input_gate=gate, kg=kg, content_mode=mode, backend=backend, resolution=resolution,
            details=dict(backend.record_details() or {}), surface=surface, template_tokens=template_tokens,
        )

    def _resolve_domain(self, context: RequestContext, user_text: str) -> DomainResolution:
        """The given domain, or (per the tenant's mode) detection from the prompt; 400 in `require` mode."""
        mode = None
        if context.domain is None:
            try:
                with self.database.session() as session:
                    mode = detection_mode(session, context.principal.tenant, default=self.settings.domain_detection)
            except (SQLAlchemyError, OSError) as exc:   # fail closed, like a record that cannot be written
                self.metrics.audit_failures.inc()
                raise AuditUnavailable(exc.__class__.__name__) from exc
        try:
            return resolve_request_domain(given=context.domain, mode=mode or "detect", detector=self.detector,
                                          prompt=user_text)
        except DomainRequired as exc:
            raise BadRequest(str(exc), code="domain_required") from exc

    # -- running ---------------------------------------------------------------------------------
    async def complete(self, prepared: Prepared) -> Outcome:
        """Generate, gate and record; return only after the record is committed."""
        pieces = [piece async for piece in self.stream(prepared)]
        outcome = pieces[-1]
        assert isinstance(outcome, Outcome)
        return outcome

    async def stream(self, prepared: Prepared, *, durable: bool = False) -> AsyncIterator[str | Outcome]:
        """Released text pieces, then the Outcome once the record is committed (raises AuditUnavailable).

        `durable` (streaming clients): the stream's opening row is committed before anything runs, and each
        piece is committed as a segment before it is yielded, so no byte leaves without a committed row."""
        hold_all = (prepared.params.response_format or {}).get("type") in ("json_object", "json_schema",
                                                                         "structural_tag")
        resolution = prepared.resolution
        gate = OutputGate(self.verifier, domain=resolution.domain, prompt=prepared.gate_text,
                          intent=prepared.context.intent, hold_all=hold_all,
                          release_at_end=not (prepared.surface.tools and prepared.surface.tools.active),  # calls: in the Outcome
                          pii_action=self.settings.output_pii_action_for(resolution.domain),
                          domains_for=resolution.observe if resolution.detecting else None)
        generation = _Generation()
        opening = self._opening(prepared) if durable else None
        # The opening row commits while generation starts: no piece is released, and no record written,
        # before it has committed; a store that takes no writes still fails the request before the first byte.
        opened = _OpeningWrite(self._store(functools.partial(insert_opening, opening=opening)) if opening else None)
        record_attempted = False
        last_piece = ""
        try:
            if prepared.input_gate.refusal is None:
                index = 0
                async for piece in self._generate(prepared, gate, generation):
                    if opening is not None:
                        await opened.committed()
                        if generation.done or gate.refused:
                            # The last piece: the record's commit covers it, so it leaves after that commit
                            # instead of after a segment commit of its own (one fsync fewer per stream).
                            last_piece = piece
                            continue
                        index += 1
                        await self._store(functools.partial(insert_segment, opening=opening, index=index,
                                                            text=self._stored_text(prepared, piece)))
                    yield piece
            await opened.committed()
            outcome = self._finish_surface(prepared, gate, generation, self._outcome(prepared, gate, generation))
            _say_withheld(prepared, gate, generation, outcome)
            record_attempted = True
            await self._record(prepared, gate, generation, outcome)
            if last_piece:
                yield last_piece
            yield outcome
        except InvalidRequestError as exc:  # the engine refused the request before any compute
            record_attempted = True
            await opened.settled()
            await self._record_failure(prepared, gate, generation, str(exc))
            if isinstance(exc, ContextLengthExceeded):
                raise BadRequest(context_length_message(
                    endpoint=prepared.context.endpoint, prompt_tokens=exc.prompt_tokens,
                    max_model_len=exc.max_model_len), code="context_length_exceeded",
                    param="messages" if prepared.context.endpoint == "chat" else "prompt") from exc
            raise BadRequest(str(exc)) from exc
        except EngineDeadError as exc:   # the engine process died under it, or is restarting
            record_attempted = True
            await opened.settled()
            await self._record_failure(prepared, gate, generation, f"engine unavailable: {exc}")
            raise EngineUnavailable(str(exc)) from exc
        except UpstreamError as exc:     # 502/504: the trail says what failed and what was delivered
            record_attempted = True
            # one line with the cause, streamed or not (a stream's status was 200 before the fault)
            logger.warning("upstream model %s failed: %s: %s", prepared.backend.model_id, exc.code, exc.summary)
            await opened.settled()
            delivered = gate.delivered if opening is not None else ""   # a plain response had not been sent
            # our summary, never the client message: the upstream's own words go in only as the content mode allows
            await self._record_failure(prepared, gate, generation, f"{exc.code}: {exc.summary}; {len(delivered)} "
                                       "characters had been delivered to the client"
                                       + exc.upstream_words(prepared.content_mode), delivered=delivered)
            exc.audit_id = prepared.audit_id
            raise
        except (anyio.get_cancelled_exc_class(), GeneratorExit):   # the client went away
            if not record_attempted:
                self.metrics.count_error("client_disconnected", 499)
            raise
        finally:
            if not record_attempted:  # client went away, or the engine failed: the trail still gets the request
                with anyio.CancelScope(shield=True):
                    await opened.settled()
                    unsent = len(last_piece)   # a held last piece never left: the trail must not say it did
                    await self._record_failure(prepared, gate, generation, "request ended before completion",
                                               swallow=True, delivered=gate.delivered[:len(gate.delivered) - unsent])

    def _opening(self, prepared: Prepared) -> StreamOpening:
        context = prepared.context
        return StreamOpening(prepared.audit_id, context.principal.tenant, prepared.content_mode, {
            "key_id": context.principal.key_id, "request_id": context.request_id, "endpoint": context.endpoint,
            "intent": context.intent, "domain": prepared.resolution.domain, "model_id": prepared.backend.model_id,
            "kv_cache": prepared.details.get("kv_cache"), "model_dtype": prepared.details.get("model_dtype"),
        })

    @staticmethod
    def _stored_text(prepared: Prepared, text: str) -> str:
        return redact_pii(text)[0] if prepared.content_mode == "redacted" else text

    async def _store(self, write: Callable[[Connection], None]) -> None:
        """A store write on the request path, committed with the others ready at the same time (group commit)
        and off the event loop; returns once committed. Any failure is AuditUnavailable (503)."""
        try:
            await self.committer.write(write)
        except (SQLAlchemyError, OSError) as exc:
            self.metrics.audit_failures.inc()
            raise AuditUnavailable(exc.__class__.__name__) from exc

    async def _generate(self, prepared: Prepared, gate: OutputGate, generation: _Generation) -> AsyncIterator[str]:
        kwargs = {"request_id": prepared.audit_id, "intent": prepared.context.intent, "output_kind": "delta",
                  "cache_salt": prepared.context.principal.tenant}  # tenants never share KV blocks
        outputs = prepared.backend.generate(prepared.prompt, prepared.params, trace=prepared.details, **kwargs)
        async with aclosing(outputs) as outputs:
            with self.traffic.serving():
                async for out in outputs:
                    generation.absorb(out)
                    if prepared.prefilled is not None:
                        prepared.prefilled.set()
                    # The validators are CPU work: keep them off the event loop that serves other requests. Most
                    # deltas only extend an unfinished sentence; those are buffered here, without a thread hop.
                    released = ""
                    if gate.buffer(out.new_text):
                        released = await self._off_loop(gate, gate.release_complete)
                    if out.finished:
                        released += await self._finish(prepared, gate, generation)
                    if released:
                        generation.first_release = generation.first_release or time.perf_counter()
                        yield released
                    if gate.refused:
                        generation.finish_reason = "content_filter"
                        break

    async def _finish(self, prepared: Prepared, gate: OutputGate, generation: _Generation) -> str:
        """The gate's last sentence and the whole output's KG check, in one worker-thread hop (each hop costs
        milliseconds of latency under load, and both are CPU work the event loop must not do)."""
        check = prepared.kg is not None and prepared.kg.applied

        def finish() -> str:
            released = gate.finish()
            if check:
                generation.violations, generation.checked = self._violations(prepared, generation.text), True
            return released
        return await anyio.to_thread.run_sync(finish) if gate.verifies or check else finish()

    @staticmethod
    async def _off_loop(gate: OutputGate, step: Callable[[], str]) -> str:
        """A gate step: on a worker thread when validators run (CPU work that must not stall the event loop
        serving other requests), inline when none do (a PII screen is cheaper than the thread hop)."""
        return await anyio.to_thread.run_sync(step) if gate.verifies else step()

    def _outcome(self, prepared: Prepared, gate: OutputGate, generation: _Generation) -> Outcome:
        refusal = prepared.input_gate.refusal
        decisions = prepared.input_gate.decisions + gate.decisions
        action = strongest([d.action for d in decisions])
        if refusal is not None:
            status, finish, delivered = "refused", "content_filter", f"I can't help with this request: {refusal.reason}."
        elif gate.refused:
            status, finish, delivered = "refused", "content_filter", gate.delivered
        else:
            status = "blocked" if action == "block" else "completed"
            finish, delivered = generation.finish_reason or "stop", gate.delivered
        # Token logprobs would reveal text the gate withheld or changed.
        logprobs = generation.logprobs if prepared.params.logprobs is not None and action in ("allow", "annotate") else None
        return Outcome(
            audit_id=prepared.audit_id, text=delivered, finish_reason=finish, status=status,
            prompt_tokens=generation.prompt_tokens, completion_tokens=generation.completion_tokens,
            gate_action=action, claim_counts=gate.claim_counts(), fer=gate.fer(),
            annotations=prepared.input_gate.annotations + gate.annotations, logprobs=logprobs,
            contradicted=[claim for claim in gate.claims if claim.get("verdict") == "contradicted"],
            domain=_domain_summary(prepared.resolution),
        )

    def _finish_surface(self, prepared: Prepared, gate: OutputGate, generation: _Generation,
                        outcome: Outcome) -> Outcome:
        """Tool calls out of the gated text (the policies decide on each), and the flag for a constrained
        output that max_tokens ended; both reach the response's `audit` and the record's `details`."""
        surface = prepared.surface
        kind = (prepared.params.response_format or {}).get("type")
        if outcome.status in ("completed", "blocked") and surface.tools is not None and surface.tools.active:
            content, calls, decisions = surface.finish_tools(
                outcome.text, audit_id=prepared.audit_id, intent=prepared.context.intent,
                tenant=prepared.context.principal.tenant, policies=self.tool_policies)
            outcome.gate_action = apply_tool_decisions(gate, decisions)
            outcome.annotations += [d.reason for d in decisions if d.action == "annotate"]
            outcome.text, outcome.tool_calls = content or "", calls or None
            if any(d.action == "block" for d in decisions):
                outcome.status = "blocked"   # like a blocked sentence: something the model wrote was withheld
            if calls:
                outcome.finish_reason = "tool_calls"
            elif surface.tool_calls:   # every call was blocked
                outcome.finish_reason = "content_filter"
                outcome.text = "I can't make this tool call: " + "; ".join(
                    f"{d.reason} [{d.rule_id}]" for d in decisions if d.action == "block") + "."
            outcome.logprobs = None     # they would spell out withheld calls
        if kind in ("json_object", "json_schema", "structural_tag") and outcome.status in ("completed", "blocked"):
            if kind == "structural_tag":  # a call cut before its end stays in the content, unparsed
                parses = surface.tools is None or surface.tools.dialect.call_opening not in outcome.text
            else:
                parses = parses_as_json(outcome.text)
            cut = surface.note_structured(generation.events, generation.finish_reason or "stop", parses=parses)
            if cut == "length" and outcome.finish_reason != "content_filter":
                outcome.finish_reason = "length"
        outcome.audit_extras = surface.audit_extras()
        return outcome

    # -- recording -------------------------------------------------------------------------------
    async def _record(self, prepared: Prepared, gate: OutputGate, generation: _Generation, outcome: Outcome) -> None:
        violations = generation.violations
        if not generation.checked and prepared.kg is not None and prepared.kg.applied:   # e.g. a refusal broke off
            violations = await anyio.to_thread.run_sync(self._violations, prepared, generation.text)
        usage = self._usage(prepared, generation, outcome.status, outcome.text, bool(outcome.tool_calls))
        record = self._build_record(prepared, gate, generation, outcome.status, outcome.gate_action, outcome.text,
                                    outcome.finish_reason, None, usage=usage, violations=violations)
        started = time.perf_counter()
        await self._store(self._append(record))
        self.metrics.audit_write.observe(time.perf_counter() - started)
        # only a client's own X-Request-Id can come back: a generated one would only crowd real ids out of the window
        if usage.excluded is None and prepared.context.client_request_id:
            self.delivered.remember(self._retry_key(prepared))
        self._observe(prepared, gate, generation, outcome.status, outcome.gate_action, usage)

    async def _record_failure(self, prepared: Prepared, gate: OutputGate, generation: _Generation, error: str,
                              *, swallow: bool = False, delivered: str | None = None) -> None:
        action = strongest([d.action for d in prepared.input_gate.decisions + gate.decisions])
        delivered = gate.delivered if delivered is None else delivered
        usage = self._usage(prepared, generation, "error", delivered, False)
        record = self._build_record(prepared, gate, generation, "error", action, delivered,
                                    generation.finish_reason or "abort", error, usage=usage)
        try:
            await self._store(self._append(record))
        except AuditUnavailable:
            if not swallow:
                raise
        finally:
            self._observe(prepared, gate, generation, "error", action, usage)

    def _append(self, record: NewRecord) -> ChainedRecordWrite:
        """The write that chains the record; the segments it now covers go in the same commit."""
        return ChainedRecordWrite(record, self.database.chain_key)

    def _build_record(self, prepared: Prepared, gate: OutputGate, generation: _Generation, status: str,
                      action: str, delivered: str, finish_reason: str, error: str | None, *, usage: Usage,
                      violations: list[str] | None = None) -> NewRecord:
        redact = prepared.content_mode == "redacted"
        output = redact_pii(generation.text)[0] if redact else generation.text
        if delivered != generation.text:
            delivered = redact_pii(delivered)[0] if redact else delivered
        else:
            delivered = output  # the usual case: one redaction pass serves both copies
        counts = gate.claim_counts()
        domain = prepared.resolution.domain
        timings = {**generation.timings, "service_e2e_s": round(time.perf_counter() - prepared.started, 6)}
        if generation.first_release is not None:
            timings["service_ttft_s"] = round(generation.first_release - prepared.started, 6)
        return NewRecord(
            id=prepared.audit_id, tenant=prepared.context.principal.tenant, status=status,
            key_id=prepared.context.principal.key_id, request_id=_stored_free_text(prepared, prepared.context.request_id),
            endpoint=prepared.context.endpoint, intent=prepared.context.intent, domain=domain,
            model_id=prepared.backend.model_id, checkpoint_hash=prepared.backend.checkpoint_hash,
            sampling_params=_params_for_record(prepared), kg_version=self.knowledge.kg_version(domain) if domain else None,
            rule_pack_hash=self.verifier.rule_pack_hash(domain), content_mode=prepared.content_mode,
            prompt=prepared.stored_prompt,
            output=output, delivered_output=delivered,
            claims=gate.claims or None, prompt_tokens=generation.prompt_tokens,
            completion_tokens=generation.completion_tokens, timings=timings,
            logprob_summary=_logprob_summary(generation.logprobs),
            kg_events=_kg_events(prepared.kg, generation.events, enforced=self.settings.kg_constraint,
                                 violations=violations),
            gate_decisions=[d.to_dict() for d in prepared.input_gate.decisions + gate.decisions],
            gate_action=action, n_supported=counts["supported"], n_contradicted=counts["contradicted"],
            n_unverifiable=counts["unverifiable"], fer=gate.fer(), finish_reason=finish_reason, error=error,
            details={**prepared.surface.record_details(prepared.content_mode, gate.decisions),
                     **prepared.details, **prepared.resolution.details(), "usage": usage.to_record()},
        )

    def _violations(self, prepared: Prepared, text: str) -> list[str] | None:
        """Entities of the constrained types the output names outside the prompt's allowed set (None: no set)."""
        kg = prepared.kg
        if kg is None or not kg.applied:   # no anchors, no neighbourhood: nothing to violate
            return None
        return self.knowledge.violations(kg.domain, text, kg.allowed_entity_ids) if text else []

    @staticmethod
    def _retry_key(prepared: Prepared) -> tuple[str, str, int]:
        return (prepared.context.principal.tenant, prepared.context.request_id, prepared.surface.choice_index)

    def _usage(self, prepared: Prepared, generation: _Generation, status: str, delivered: str,
               tool_calls: bool) -> Usage:
        retry = prepared.context.client_request_id and self.delivered.seen_before(self._retry_key(prepared))
        return usage_for(
            prices=self.prices, model_id=prepared.backend.model_id,
            prompt_tokens=generation.prompt_tokens, completion_tokens=generation.completion_tokens,
            template_tokens=prepared.template_tokens, engine_seconds=generation.engine_seconds,
            excluded=excluded_reason(status=status, delivered=delivered, tool_calls=tool_calls, retry=retry),
            prompt_billed=prepared.surface.choice_index == 0)

    def _observe(self, prepared: Prepared, gate: OutputGate, generation: _Generation, status: str, gate_action: str,
                 usage: Usage) -> None:
        context = prepared.context
        ttft = None if generation.first_release is None else generation.first_release - prepared.started
        self.metrics.observe_request(RequestObservation(
            endpoint=context.endpoint, status=status, intent=context.intent, tenant=context.principal.tenant,
            model=prepared.backend.model_id, e2e_s=time.perf_counter() - prepared.started, ttft_s=ttft,
            queue_s=generation.timings.get("queue_s"), token_gaps=generation.token_gaps,
            decisions=[(d.stage, d.action) for d in prepared.input_gate.decisions + gate.decisions],
            gate_action=gate_action, claim_counts=gate.claim_counts(), fer=gate.fer(), usage=usage))

def _say_withheld(prepared: Prepared, gate: OutputGate, generation: _Generation, outcome: Outcome) -> None:
    """An input refusal, or output the gate withheld wholly or in part, says so in the standard fields: a
    refusal text naming the rules and the audit id, and finish_reason content_filter (tool calls that were
    delivered keep "tool_calls": the client must still run them). The model's own finish reason stays in the
    `audit` extra."""
    refused = prepared.input_gate.refusal
    if refused is not None:
        outcome.refusal = input_refusal(refused, prepared.audit_id)
        return
    rules = withheld_rules(gate.decisions)
    if not rules:
        return
    # the service's own sentence ("I can't provide this answer: ...") replaced everything the model wrote
    own_words = outcome.finish_reason == "content_filter" and outcome.text.startswith("I can't")
    whole = not outcome.tool_calls and (not outcome.text.strip() or own_words)
    outcome.refusal = output_refusal(rules, prepared.audit_id, whole=whole)
    outcome.audit_extras["withheld"] = {"rule_ids": rules, "model_finish_reason": generation.finish_reason}
    if outcome.finish_reason != "tool_calls":
        outcome.finish_reason = "content_filter"


def _domain_summary(resolution: DomainResolution) -> dict[str, Any]:
    """What the response tells the client about the domain its output was verified under."""
    entry = resolution.details()["domain_resolution"]
    detection = entry["detection"]
    return {"name": resolution.domain, "source": entry["source"], "verified_under": entry["verified_under"],
            "scores": detection["scores"] if detection else None}


def _stored_free_text(prepared: Prepared, text: str) -> str:
    """Client-chosen strings outside the prompt (X-Request-Id, stop sequences) follow the content mode too:
    unless it is "raw", PII in them is redacted from the stored copy."""
    return text if prepared.content_mode == "raw" else redact_pii(text)[0]


def _params_for_record(prepared: Prepared) -> dict[str, Any]:
    """Sampling parameters as stored: the allowed-entity list is summarised by its size and digest, and stop
    sequences are stored under the content mode's PII rule."""
    values = asdict(prepared.params)
    values["stop"] = [_stored_free_text(prepared, stop) for stop in values.get("stop") or []]
    extra = values.pop("extra_args")
    kg = extra.get("kg_constraint")
    if kg:
        allowed = sorted(kg.get("allowed_entity_ids", []))
        values["kg_constraint"] = {"domain": kg.get("domain"), "allowed_count": len(allowed),
                                   "allowed_sha256": sha256_text(json.dumps(allowed))}
    return values


def _kg_events(kg: KgConstraint | None, engine_events: list[dict[str, Any]], *, enforced: bool,
               violations: list[str] | None) -> list[dict[str, Any]] | None:
    """The linking step (anchors, allowed-set size), the constraint processor's own events, then the check of
    the output against the allowed set (entities of the constrained types it names outside it)."""
    if kg is None:
        return engine_events or None
    kind = ("constrained" if enforced else "not_enforced") if kg.applied else "no_anchors"
    linking = [{"processor": "kg_linking", "position": -1, "kind": kind,
                "data": {"domain": kg.domain, "anchor_ids": kg.anchor_ids, "allowed_count": len(kg.allowed_entity_ids)}}]
    check = [] if violations is None else [{"processor": "kg_linking", "position": -1, "kind": "output_check",
                                            "data": {"violations": len(violations), "entity_ids": violations[:20]}}]
    return linking + engine_events + check


def _logprob_summary(logprobs: list[TokenLogprob]) -> dict[str, Any] | None:
    if not logprobs:
        return None
    values = [lp.logprob for lp in logprobs]
    mean = sum(values) / len(values)
    return {"tokens": len(values), "mean_logprob": round(mean, 6), "min_logprob": round(min(values), 6),
            "perplexity": round(float(pow(2.718281828459045, -mean)), 6)}

