"""The review workflow over HTTP: the queue (reviewers, auditors, admins) and the disputed-verdict feedback
file for rule-pack authors (auditors, admins). Reviews themselves are POSTed to /v1/audits/{id}/reviews."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from auditor.api.audits import read_errors
from auditor.api.deps import DatabaseDep, ReaderDep, ReviewerDep, SettingsDep
from auditor.api.schemas import AuditPage
from auditor.trail import reviews
from auditor.trail.reviews import FeedbackFilters, QueueFilters

router = APIRouter(prefix="/v1/reviews", tags=["review"])


@router.get("/queue", response_model=AuditPage)
def review_queue(filters: Annotated[QueueFilters, Query()], database: DatabaseDep, settings: SettingsDep,
                 reviewer: ReviewerDep) -> AuditPage:
    """Records whose current verdicts are contradicted, blocked or low-confidence and not yet reviewed."""
    with read_errors():
        rows, cursor = reviews.review_queue(database, reviewer, filters,
                                            default_min_confidence=settings.review_min_confidence)
    return AuditPage(data=rows, next_cursor=cursor)


@router.get("/feedback")
def feedback(filters: Annotated[FeedbackFilters, Query()], database: DatabaseDep, reader: ReaderDep) -> StreamingResponse:
    """Every disputed claim as a JSON line: the claim as judged (text, verdict, evidence, rules), the pack
    version, the dispute and the reviewer's note."""
    def lines() -> Iterator[str]:
        for line in reviews.feedback_lines(database, reader, filters):
            yield json.dumps(line, ensure_ascii=False, default=str) + "\n"

    return StreamingResponse(lines(), media_type="application/x-ndjson",
                             headers={"Content-Disposition": 'attachment; filename="review-feedback.jsonl"'})
