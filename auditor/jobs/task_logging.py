"""The Celery worker's log lines in the service's format (`auditor.logs`), each task's lines carrying the record
(`audit_id`) or re-audit job it works on and its own task id as `request_id`."""

from __future__ import annotations

from typing import Any

from celery.signals import setup_logging, task_postrun, task_prerun

from auditor.logs import bind, configure
from auditor.settings import get_settings

_contexts: dict[str, Any] = {}   # task id -> the open log context (prerun and postrun run in the same process)


@setup_logging.connect
def _service_format(loglevel: Any = None, **_: Any) -> None:
    """Connected, this replaces Celery's own logging set-up: one format for every process of the service."""
    settings = get_settings()
    level = loglevel if isinstance(loglevel, (int, str)) and loglevel else settings.log_level
    configure(settings.log_format, level=level)


@task_prerun.connect
def _open_task_context(task_id: str | None = None, task: Any = None, args: Any = (), kwargs: Any = None,
                       **_: Any) -> None:
    from auditor.logs import log_context

    context = log_context(request_id=task_id)
    context.__enter__()
    _contexts[task_id or ""] = context
    values = {**dict(zip(_PARAMETERS.get(getattr(task, "name", ""), ()), args or (), strict=False)), **(kwargs or {})}
    bind(audit_id=values.get("record_id"), job_id=values.get("job_id"))


@task_postrun.connect
def _close_task_context(task_id: str | None = None, **_: Any) -> None:
    context = _contexts.pop(task_id or "", None)
    if context is not None:
        context.__exit__(None, None, None)


# positional parameters of the tasks whose arguments name a record or a job (auditor.jobs.worker)
_PARAMETERS = {"auditor.score_record": ("record_id", "outbox_id"), "auditor.reaudit_chunk": ("job_id", "chunk")}
