"""JSON-schema hook: x-kg-entity-type fields become enums of allowed names, XGrammar enforces them."""

from __future__ import annotations

import copy
import json

import pytest

from knowledge_graphs.decoding.constraint import allowed_entities
from knowledge_graphs.decoding.schema_enum import (
    SchemaEnumError,
    allowed_names_by_type,
    expand_kg_entity_enums,
)
from knowledge_graphs.model import KnowledgeGraph

SCHEMA = {
    "type": "object",
    "properties": {
        "drug": {"type": "string", "x-kg-entity-type": "drug", "description": "the drug"},
        "dose_mg": {"type": "number"},
        "interactions": {"type": "array", "items": {"type": "object", "properties": {
            "with": {"x-kg-entity-type": "drug"},
            "condition": {"anyOf": [{"type": "null"}, {"type": "string", "x-kg-entity-type": "condition"}]},
        }}},
    },
    "$defs": {"cond": {"type": "string", "x-kg-entity-type": "condition"}},
    "required": ["drug"],
}


def test_marked_fields_become_enums_everywhere(kg: KnowledgeGraph) -> None:
    original = copy.deepcopy(SCHEMA)
    names = allowed_names_by_type(kg, allowed_entities(kg, ["drug:metformin", "drug:warfarin"]))
    assert names == {"drug": ["Aspirin", "Metformin", "Warfarin"], "condition": ["type 2 diabetes"]}
    expanded = expand_kg_entity_enums(SCHEMA, names)
    assert SCHEMA == original                                    # the input is never modified
    assert expanded["properties"]["drug"] == {"description": "the drug", "type": "string",
                                              "enum": ["Aspirin", "Metformin", "Warfarin"]}
    item = expanded["properties"]["interactions"]["items"]["properties"]
    assert item["with"]["enum"] == ["Aspirin", "Metformin", "Warfarin"]
    assert item["condition"]["anyOf"][1] == {"type": "string", "enum": ["type 2 diabetes"]}
    assert expanded["$defs"]["cond"]["enum"] == ["type 2 diabetes"]
    assert "x-kg-entity-type" not in json.dumps(expanded)
    assert expanded["properties"]["dose_mg"] == {"type": "number"}


@pytest.mark.parametrize("schema, names, message", [
    ({"properties": {"d": {"x-kg-entity-type": "drug"}}}, {"condition": ["x"]}, "no allowed entities"),
    ({"properties": {"d": {"type": "integer", "x-kg-entity-type": "drug"}}}, {"drug": ["x"]}, "string"),
    ([], {}, "JSON object"),
])
def test_unusable_marks_are_clear_errors(schema: object, names: dict[str, list[str]], message: str) -> None:
    with pytest.raises(SchemaEnumError, match=message):
        expand_kg_entity_enums(schema, names)  # type: ignore[arg-type]
    assert issubclass(SchemaEnumError, ValueError)


def test_xgrammar_accepts_only_allowed_names() -> None:
    xgrammar = pytest.importorskip("xgrammar")
    schema = expand_kg_entity_enums({"type": "object", "properties": {"drug": {"x-kg-entity-type": "drug"}},
                                     "required": ["drug"]}, {"drug": ["Metformin", "Warfarin"]})
    grammar = xgrammar.Grammar.from_json_schema(json.dumps(schema))
    for text, ok in [('{"drug": "Metformin"}', True), ('{"drug": "Metoprolol"}', False)]:
        assert _accepts(xgrammar, grammar, text) is ok


def _accepts(xgrammar: object, grammar: object, text: str) -> bool:
    matcher_cls = getattr(xgrammar, "testing", None)
    if matcher_cls is not None and hasattr(matcher_cls, "_is_grammar_accept_string"):
        return bool(matcher_cls._is_grammar_accept_string(grammar, text))
    pytest.skip("this xgrammar build has no string-acceptance helper")
    return False
