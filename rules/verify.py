"""`verify(text, domain)`: run a domain's rule pack over a text and assemble the `Report`.

Findings from several rules about the same claim (same span and kind) merge into one claim:
contradicted if any rule contradicts it, else supported if any rule supports it, else unverifiable.
KGs, packs, automata and registries are loaded once per process (module-level caches), so a call costs
one pass of each validator over the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from knowledge_graphs.model import KnowledgeGraph
from rules.claims import Document
from rules.extraction.reading import reading_view
from rules.packs import DOMAINS, RulePack, load_pack
from rules.report import Citation, Claim, DomainVersions, Evidence, GateAction, Report, Versions
from rules.routing import touched_domains
from rules.scores import citation_confidence, factual_error_rate, joint_score
from rules.validators import EVALUATOR_VERSION, VALIDATORS, Finding
from rules.validators.base import package_version


class UnknownDomainError(ValueError):
    """The domain has no rule pack."""


class EmptyTextError(ValueError):
    """Nothing to verify."""


# Packages whose data or code decide verdicts; their versions go into every report.
_DECIDING_PACKAGES = ("eyecite", "reporters-db", "courts-db", "python-stdnum", "schwifty", "pycountry",
                      "simple-icd-10-cm", "drug-named-entity-recognition")


def _load_kg(domain: str) -> KnowledgeGraph | None:
    from knowledge_graphs import load_kg

    return load_kg(domain)


def verify(
    text: str,
    domain: str,
    *,
    prompt: str | None = None,
    pack: RulePack | str | Path | None = None,
    intent: str | None = None,
    kg: KnowledgeGraph | None = None,
    route: bool = True,
    packs: Mapping[str, RulePack] | None = None,
    kgs: Mapping[str, KnowledgeGraph] | None = None,
) -> Report:
    """Extract the checkable claims of `text` and judge each against the domain's validators.

    `prompt` (the question that produced `text`) supplies context the answer leaves implicit: the patient
    population of a dose ("my child") and the date a list claim refers to. `pack` is a loaded RulePack, a
    path to a pack file, or None for the bundled pack of `domain`; `intent` restricts the rules to those that
    apply to it; `kg` overrides `knowledge_graphs.load_kg(domain)`.
    With `route` (the default), the other domains the text touches (`rules.routing`) run their packs too (`packs`
    gives a domain's active pack, else the bundled one; `kgs` its KG, else `load_kg`'s): each claim is judged by the
    checkers of its own domain and carries it, and a gate action follows the rule of the pack that fired.
    Raises UnknownDomainError / EmptyTextError (ValueError subclasses) and PackError for a bad pack.
    """
    if domain not in DOMAINS:
        raise UnknownDomainError(f"unknown domain {domain!r} (known: {', '.join(DOMAINS)})")
    if not text or not text.strip():
        raise EmptyTextError("nothing to verify: the text is empty")
    rule_pack = pack if isinstance(pack, RulePack) else load_pack(pack if pack is not None else domain)
    if rule_pack.domain != domain:
        raise UnknownDomainError(f"rule pack is for {rule_pack.domain!r}, not {domain!r}")
    graph = kg if kg is not None else _load_kg(domain)
    view = reading_view(text)
    runs = [(domain, rule_pack, graph)]
    if route:
        for other in touched_domains(view.text, domain):
            other_kg = (kgs or {}).get(other) or _load_kg(other)
            runs.append((other, (packs or {}).get(other) or load_pack(other), other_kg))
    tagged: list[tuple[str, Finding]] = []
    for run_domain, run_pack, run_kg in runs:
        doc = Document(text=view.text, domain=run_domain, kg=run_kg, prompt=prompt)
        doc.cache["findings"] = []
        found: list[tuple[str, Finding]] = []
        for rule in run_pack.rules_for(intent):
            for finding in VALIDATORS[rule.validator](doc, rule.parameters):
                for item in finding.evidence:
                    item.rule_id = item.rule_id or rule.id
                finding.meta["domain"] = run_domain
                found.append((rule.id, finding))
                doc.cache["findings"].append(finding)
        tagged += found if run_domain == domain else _routed(found, tagged, graph)
    if view.rewritten:
        for _, finding in tagged:
            finding.span = view.span(*finding.span)
            finding.text = text[finding.span[0]:finding.span[1]]
    return _assemble(domain, tagged, {d: p for d, p, _ in runs}, {d: k for d, _, k in runs})


def _routed(found: list[tuple[str, Finding]], kept: list[tuple[str, Finding]], own_kg: KnowledgeGraph | None
            ) -> list[tuple[str, Finding]]:
    """Another domain's findings that add something: a verdict, or a reference marked as a possible fabrication
    that the request domain's KG does not hold either; never one that overlaps a span a domain already run has
    judged (the request's domain owns what it reads)."""
    taken = [f.span for _, f in kept]

    def adds(f: Finding) -> bool:
        if f.verdict != "unverifiable":
            return True
        return any(e.kind == "possible_fabrication" for e in f.evidence) and not _known_reference(own_kg, f.text)

    return [(rule_id, f) for rule_id, f in found if not any(s[0] < f.span[1] and f.span[0] < s[1] for s in taken) and adds(f)]


_ANNOTATED_CODE = re.compile(r"U\.\s?S\.\s?C\.\s?[AS]\.?")


def _known_reference(kg: KnowledgeGraph | None, reference: str) -> bool:
    """Whether a KG names the reference ("26 U.S.C.A. 6050I" is 26 U.S.C. 6050I, with or without "§")."""
    if kg is None:
        return False
    plain = _ANNOTATED_CODE.sub("U.S.C.", reference)
    return any(kg.lookup(form) for form in {reference, plain, plain.replace("§", " ")})


def verify_many(texts: Iterable[str], domain: str, **kwargs: object) -> list[Report]:
    """Verify several texts with the same pack and KG (loaded once)."""
    return [verify(text, domain, **kwargs) for text in texts]  # type: ignore[arg-type]


def _assemble(domain: str, tagged: list[tuple[str, Finding]], packs: dict[str, RulePack],
              kgs: dict[str, KnowledgeGraph | None]) -> Report:
    groups: dict[tuple[int, int, str], list[tuple[str, Finding]]] = {}
    for rule_id, finding in tagged:
        groups.setdefault((finding.span[0], finding.span[1], finding.kind), []).append((rule_id, finding))
    claims: list[Claim] = []
    citations: list[Citation] = []
    gate_actions: list[GateAction] = []
    contradicted_spans = [key[:2] for key, members in groups.items() if any(f.verdict == "contradicted" for _, f in members)]
    for key in sorted(groups):
        members = groups[key]
        claim, deciding = _merge(members)
        claim = _without_hidden_contradiction(claim, contradicted_spans)
        index = len(claims)
        claims.append(claim)
        cited = next((f for _, f in members if f.citation is not None), None)
        if cited is not None and cited.citation is not None:
            check = next((f.citation for _, f in deciding if f.citation is not None), cited.citation)
            citations.append(Citation(text=claim.text, span=claim.span, kind=check.kind, resolution=check.resolution,
                                      supports_claim=check.supports_claim, claim_index=index))
        if claim.verdict == "contradicted":
            for rule_id, finding in deciding:
                rule = packs[finding.meta.get("domain", domain)].rule(rule_id)
                gate_actions.append(GateAction(claim_index=index, rule_id=rule_id, severity=rule.severity,
                                               on_fail=rule.on_fail))
    fer = factual_error_rate(claims)
    rc = citation_confidence(citations)
    kg = kgs[domain]
    versions = Versions(
        kg=kg.version if kg is not None else None,
        rule_pack=packs[domain].hash,
        packages={name: package_version(name) for name in _DECIDING_PACKAGES},
        evaluator=EVALUATOR_VERSION,
        other_domains={d: DomainVersions(kg=k.version if k is not None else None, rule_pack=packs[d].hash)
                       for d, k in kgs.items() if d != domain},
    )
    return Report(domain=domain, claims=claims, citations=citations, fer=fer, citation_confidence=rc,
                  joint_score=joint_score(fer, rc), versions=versions, gate_actions=gate_actions)


def _without_hidden_contradiction(claim: Claim, contradicted: list[tuple[int, int]]) -> Claim:
    """A supported claim whose span holds a contradicted one ("31 U.S.C. 5313 requires reports over $5,000": the
    reference is real, the amount inside it wrong) is not shown as supported: a reader colours the whole span."""
    if claim.verdict != "supported":
        return claim
    inside = [s for s in contradicted if claim.span[0] <= s[0] and s[1] <= claim.span[1] and s != tuple(claim.span)]
    if not inside:
        return claim
    note = Evidence(kind="rule", description="not supported as a whole: it contains a contradicted claim at "
                    + ", ".join(f"[{s[0]}, {s[1]})" for s in inside))
    return claim.model_copy(update={"verdict": "unverifiable", "evidence": [note, *claim.evidence]})


def _first_of_each(evidence: list[Evidence]) -> list[Evidence]:
    seen: set[tuple[str, str, str | None, str | None]] = set()
    unique = []
    for item in evidence:
        key = (item.kind, item.description, item.source, item.locator)
        if key not in seen:
            seen.add(key)
            unique.append(item)
    return unique


def _merge(members: list[tuple[str, Finding]]) -> tuple[Claim, list[tuple[str, Finding]]]:
    """One claim from the findings of several rules; returns it and the findings that decided it."""
    for verdict in ("contradicted", "supported", "unverifiable"):
        deciding = [(r, f) for r, f in members if f.verdict == verdict]
        if deciding:
            break
    first = deciding[0][1]
    evidence: list[Evidence] = [e for _, f in deciding for e in f.evidence]
    evidence += [e for _, f in members if f.verdict != first.verdict for e in f.evidence]
    # two rules may find the same thing (a section proved absent is both a statute and an existence finding)
    evidence = _first_of_each(evidence)
    claim = Claim(
        text=first.text,
        span=first.span,
        kind=first.kind,
        verdict=first.verdict,  # type: ignore[arg-type]
        confidence=round(max(f.confidence for _, f in deciding), 4),
        evidence=evidence,
        rule_ids=list(dict.fromkeys(r for r, _ in deciding)),
        subject=next((f.subject for _, f in deciding if f.subject), None),
        domain=first.meta.get("domain"),
    )
    return claim, deciding
