"""Templates, the filter form's parsing, and the console's error pages."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ValidationError
from starlette.templating import Jinja2Templates

from auditor.api.errors import ApiError
from auditor.console.auth import ConsoleUser

templates = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
templates.env.globals["urlencode"] = urlencode


def _when(value: Any) -> str:
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S UTC")
    return "" if value is None else str(value)


def _percent(value: Any) -> str:
    return "–" if value is None else f"{float(value) * 100:.1f}%"


templates.env.filters["when"] = _when
templates.env.filters["percent"] = _percent

Model = TypeVar("Model", bound=BaseModel)


class FormProblem(ValueError):
    """A filter or form field the page cannot use: shown above the form, never a 422 or a traceback."""


def render(request: Request, name: str, user: ConsoleUser | None, status_code: int = 200, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, {"user": user, **context}, status_code=status_code)


def model_from(model: type[Model], values: dict[str, Any], *, only: set[str] | None = None) -> Model:
    """A pydantic model from form or query values: blank fields are left out; errors become FormProblem."""
    fields = set(model.model_fields) if only is None else only
    given = {name: value for name, value in values.items() if name in fields and value not in ("", None)}
    try:
        return model.model_validate(given)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'form'}: {e['msg']}" for e in exc.errors())
        raise FormProblem(problems) from None


@contextmanager
def problems_shown(errors: list[str]) -> Iterator[None]:
    """Collect a FormProblem (or a service's ValueError) into `errors` for the page to show."""
    try:
        yield
    except ApiError as exc:   # an API route function reused as the service (its validation and messages)
        errors.append(exc.message)
    except (ValueError, LookupError, PermissionError) as exc:   # the services' refusals: FormProblem, not found, ...
        errors.append(str(exc))
