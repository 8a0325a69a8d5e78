"""Background work: scoring records into evaluations, the transactional outbox, re-audit jobs, JSONL imports,
and the two ways they run (Celery workers, or an in-process pool when no broker is configured)."""
