"""Whether a JSON value (a request body's free-form object, an imported line) holds text the store cannot keep.

`clean_text` refuses NUL and lone surrogates in one string field; free-form objects (an import's `metadata`, a
tool's JSON-schema `parameters`) nest strings at any depth and in keys, so they are walked whole. Refusing at
the edge is what keeps a record from failing on PostgreSQL halfway through an import, and keeps any stored
`\\u0000` from breaking JSON reads of the table (`auditor.trail.stored_json`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator

from auditor.trail.schemas import clean_text


def unstorable_at(value: Any) -> tuple[str, str] | None:
    """(path such as "metadata.a.0.b", why) of the first string or key the store cannot keep, or None."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:   # iterative: however deep the nesting, no RecursionError
        path, item = stack.pop()
        if isinstance(item, str):
            if (why := _refusal(item)) is not None:
                return path, why
        elif isinstance(item, dict):
            for key, child in reversed(list(item.items())):
                key_text = str(key)
                child_path = f"{path}.{key_text}" if path else key_text
                if isinstance(key, str) and (why := _refusal(key)) is not None:
                    return _printable(child_path), f"key: {why}"
                stack.append((child_path, child))
        elif isinstance(item, list | tuple):
            stack.extend((f"{path}.{i}" if path else str(i), child) for i, child in reversed(list(enumerate(item))))
    return None


def _refusal(text: str) -> str | None:
    if text.isascii() and "\x00" not in text:
        return None
    try:
        clean_text(text)
    except ValueError as exc:
        return str(exc)
    return None


def _printable(path: str) -> str:
    # the path names the bad key itself, which must not carry the NUL or surrogate into the error message
    return path.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def refuse_non_finite(constant: str) -> float:
    """`parse_constant` for json.loads: NaN and Infinity, which Python reads and JSON and PostgreSQL do not."""
    raise ValueError(f"{constant} is not a JSON number; send a finite number")


def clean_json(value: Any) -> Any:
    """A pydantic validator: the value unchanged, or ValueError naming where the unstorable text is."""
    found = unstorable_at(value)
    if found is not None:
        path, why = found
        raise ValueError(f"{path}: {why}" if path else why)
    return value


CleanJson = Annotated[dict[str, Any], AfterValidator(clean_json)]
