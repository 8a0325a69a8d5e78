"""What a request may name: its prompt's anchor entities and their neighbourhood in the domain KG, per domain
defaults (which entity types are constrained, which relations the neighbourhood follows, how many hops).

Plain KG code, apart from the torch-side constraint (`decoding`) that masks the logits to it: an API process
computes the allowed set before it sends a request to the engine core, and loads no torch for it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from knowledge_graphs.model import KnowledgeGraph


@dataclass(frozen=True, slots=True)
class DomainDefaults:
    types: frozenset[str]        # entity types whose mentions are constrained
    relations: frozenset[str]    # relations the allowed neighbourhood follows
    hops: int


# Why these: in medicine the dangerous slip is naming the wrong drug or condition; two hops reach
# drug -> condition -> the other drugs for it, and drug -> class -> its siblings. In finance the
# claims that matter are which country sits on which risk list; two hops give country -> list ->
# the other listed countries. In law the constrained names are cases, statutes and documented
# fabricated citations; a fabricated citation reaches the decision that documented it in one hop
# (documented_in: "Varghese ... documented in Mata v. Avianca, Inc."), a case the fabricated
# citations it documented. Statutes are only allowed when named (anchors), as the KG holds no
# case->statute edges. Courts are NOT constrained: their courts-db surface forms are short
# abbreviations and bare state names ("S.C.", "Ohio", "U.S. Dist. V.I.") that occur inside case
# names and citations ("Brandenburg v. Ohio", "28 U.S.C. §", "395 U.S. 444"), so constraining them
# blocked ordinary legal writing; which court decided a case is checked by the legal rule pack.
DOMAIN_DEFAULTS: dict[str, DomainDefaults] = {
    "medical": DomainDefaults(
        frozenset({"drug", "condition"}),
        frozenset({"indicated_for", "contraindicated_in", "interacts_with", "in_class"}), 2),
    "finance": DomainDefaults(frozenset({"country", "risk_list"}), frozenset({"listed_on"}), 2),
    "legal": DomainDefaults(frozenset({"case", "statute", "fabricated_citation"}),
                           frozenset({"decided_by", "reported_in", "documented_in"}), 1),
}


def allowed_entities(
    kg: KnowledgeGraph, anchors: Iterable[str], *, hops: int | None = None,
    relations: Collection[str] | None = None, types: Collection[str] | None = None,
    extra_filter: Callable[[str], bool] | None = None,
) -> frozenset[str]:
    """Anchors plus their `hops`-neighbourhood over `relations`, narrowed to `types` and `extra_filter`.

    Unset hops/relations/types take the domain's `DOMAIN_DEFAULTS` (all relations and types for an
    unknown domain). Anchors that are not in the KG are ignored.
    """
    defaults = DOMAIN_DEFAULTS.get(kg.domain)
    hops = hops if hops is not None else (defaults.hops if defaults else 1)
    relations = relations if relations is not None else (defaults.relations if defaults else None)
    types = types if types is not None else (defaults.types if defaults else None)
    if hops < 0:
        raise ValueError(f"hops must be >= 0, got {hops}")
    found: set[str] = set()
    for anchor in anchors:
        if kg.entity(anchor) is None:
            continue
        found.add(anchor)
        if hops:
            found |= kg.neighbours(anchor, relations=relations, hops=hops)
    result = set()
    for entity_id in found:
        entity = kg.entity(entity_id)
        if entity is None or (types is not None and entity.type not in types):
            continue
        if extra_filter is not None and not extra_filter(entity_id):
            continue
        result.add(entity_id)
    return frozenset(result)
