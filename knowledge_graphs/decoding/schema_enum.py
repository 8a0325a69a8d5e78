"""JSON-schema hook: fields marked `"x-kg-entity-type": "<type>"` become enums of allowed entity names.

XGrammar then enforces the enum, so a structured answer can only name entities the KG allows. The
input schema is never modified; nested objects, arrays, combinators and `$defs` are all visited.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from typing import Any

from knowledge_graphs.model import KnowledgeGraph

MARKER = "x-kg-entity-type"


class SchemaEnumError(ValueError):
    """A marked field that cannot become an enum (no allowed names, or a non-string type)."""


def expand_kg_entity_enums(schema: dict[str, Any], allowed_names_by_type: Mapping[str, list[str]]) -> dict[str, Any]:
    """A deep copy of `schema` in which every node carrying `x-kg-entity-type` is replaced by
    `{"type": "string", "enum": [names]}` (its description/title kept)."""
    if not isinstance(schema, dict):
        raise SchemaEnumError(f"schema must be a JSON object, got {type(schema).__name__}")
    return _expand(copy.deepcopy(schema), allowed_names_by_type, "$")


def _expand(node: Any, names: Mapping[str, list[str]], path: str) -> Any:
    if isinstance(node, list):
        return [_expand(item, names, f"{path}[{i}]") for i, item in enumerate(node)]
    if not isinstance(node, dict):
        return node
    if MARKER in node:
        entity_type = node[MARKER]
        declared = node.get("type", "string")
        if declared != "string":
            raise SchemaEnumError(f"{path}: {MARKER} needs a string field, got type {declared!r}")
        allowed = list(dict.fromkeys(names.get(entity_type, [])))
        if not allowed:
            raise SchemaEnumError(f"{path}: no allowed entities of type {entity_type!r} for {MARKER}")
        kept = {k: node[k] for k in ("title", "description") if k in node}
        return {**kept, "type": "string", "enum": allowed}
    return {key: _expand(value, names, f"{path}.{key}") for key, value in node.items()}


def allowed_names_by_type(kg: KnowledgeGraph, allowed_ids: Collection[str]) -> dict[str, list[str]]:
    """Canonical names of the allowed entities grouped by type, sorted, for `expand_kg_entity_enums`."""
    grouped: dict[str, list[str]] = {}
    for entity_id in sorted(allowed_ids):
        entity = kg.entity(entity_id)
        if entity is not None:
            grouped.setdefault(entity.type, []).append(entity.name)
    return {t: sorted(set(v)) for t, v in grouped.items()}
