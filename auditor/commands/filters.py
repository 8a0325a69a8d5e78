"""The record filter as CLI options, generated from `RecordFilter` so the CLI and the API take the same
filters with the same help: `audits list|export`, `review queue`, `reaudit start` and `trends` share them.

Yes/no filters are flag pairs everywhere (`--has-contradicted` / `--no-contradicted`), and times take ISO
dates or spans back from now (`--since 1d`, `--since 12h`)."""

from __future__ import annotations

import argparse
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from auditor.cli import CliError
from auditor.commands.common import validation_message
from auditor.trail.schemas import RecordFilter

F = TypeVar("F", bound=BaseModel)

# Yes/no filters: field -> (the "yes" flag, the "no" flag).
FLAG_PAIRS = {
    "has_contradicted": ("--has-contradicted", "--no-contradicted"),
    "fabrication": ("--fabrication", "--no-fabrication"),
    "stale": ("--stale", "--current-pack"),
    "reviewed": ("--reviewed", "--unreviewed"),
    "kg_withdrawn": ("--kg-withdrawn", "--no-kg-withdrawn"),
}
_METAVARS = {"since": "WHEN", "until": "WHEN", "recorded_since": "WHEN", "recorded_until": "WHEN", "q": "TEXT"}


def filter_fields(*, include_tenant: bool = True) -> list[str]:
    return [name for name in RecordFilter.model_fields if include_tenant or name != "tenant"]


def add_record_filters(parser: argparse.ArgumentParser, *, title: str = "which records") -> None:
    group = parser.add_argument_group(title)
    for name, field in RecordFilter.model_fields.items():
        help_text = field.description or name.replace("_", " ")
        if name in FLAG_PAIRS:
            yes, no = FLAG_PAIRS[name]
            pair = group.add_mutually_exclusive_group()
            pair.add_argument(yes, dest=name, action="store_true", default=None, help=f"{help_text}: yes")
            pair.add_argument(no, dest=name, action="store_false", help=f"{help_text}: no")
            continue
        group.add_argument(f"--{name.replace('_', '-')}", dest=name, metavar=_METAVARS.get(name, name.upper()),
                           help=_with_choices(help_text, field.annotation))


def _with_choices(help_text: str, annotation: Any) -> str:
    choices = getattr(annotation, "__args__", None)
    literal = next((a for a in choices or () if getattr(a, "__origin__", None) is not None and
                    str(getattr(a, "__origin__", "")).endswith("Literal")), None)
    return f"{help_text} ({', '.join(literal.__args__)})" if literal is not None else help_text


def record_filter_values(args: argparse.Namespace) -> dict[str, Any]:
    return {name: getattr(args, name) for name in RecordFilter.model_fields if getattr(args, name, None) is not None}


def build_filter(model: type[F], args: argparse.Namespace, **extra: Any) -> F:
    """The filter the options name, or a one-line CLI error naming the option."""
    try:
        return model.model_validate({**record_filter_values(args), **extra})
    except ValidationError as exc:
        raise CliError(validation_message(exc)) from None
