"""KG -> decoding constraint: the torch-side part of `knowledge_graphs`, which keeps what a model writes
inside the entities a request may name. `constraint.KGConstraintProcessor` is an engine logits processor:
token tries steer mentions towards allowed names (`trie`), and a character guard over the normalised
text guarantees that no forbidden name is completed (`surface_guard` holds its rules, `vocab_guard`
applies them to the whole vocabulary per decoding state from the per-domain walk records of
`guard_records`, `constraint_masks` keeps the resulting bitmasks); `vocab_text` reads what text each
token adds, and `schema_enum` turns `x-kg-entity-type` fields of a JSON schema into enums for JSON mode.
This subpackage is the only part of `knowledge_graphs` that imports `engine`; the KG model, the data,
its sources and entity linking beside it do not (the `kg-decoding-only` import contract in
pyproject.toml checks it).
"""
