"""Question-answer corpus for the bundled demo model, generated from the domain knowledge graphs.

Every KG fact becomes a few chat turns: a question in one of several phrasings and an answer that
states the fact, names the entities and cites the fact's provenance. The last phrasing of every
kind of question is held out of training and used for the hallucination evaluation's prompts
(`benchmarks/data/hallucination_prompts.jsonl`), so the evaluation asks about known facts in words the
model has not seen.

Deterministic: the same KGs and seed give byte-identical output.

    python -m scripts.demo_corpus --out var/demo_corpus.jsonl
    python -m scripts.demo_corpus --eval-prompts benchmarks/data/hallucination_prompts.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from knowledge_graphs.model import Entity, Fact, KnowledgeGraph, Provenance

# "section 2 DOSAGE AND ADMINISTRATION", "Highlights", "Drug Facts" inside a label locator
SECTION = re.compile(r"\bsection \d+(?: [A-Z][A-Z ,&]*[A-Z])?|\bHighlights\b|\bDrug Facts\b")
MAX_LISTED = 4          # list answers name at most this many entities (keeps answers inside the context)


@dataclass(frozen=True, slots=True)
class QA:
    """One question about KG facts, its reference answer and what a correct answer must contain."""

    domain: str
    kind: str                                  # dose | indication | interaction | list_membership | ...
    questions: tuple[str, ...]                 # paraphrases; the last one is held out for evaluation
    answer: str
    gold_entities: tuple[str, ...] = ()        # entity ids a correct answer names
    gold_literals: tuple[str, ...] = ()        # strings a correct answer contains ("2550", "384 U.S. 436")
    subject: str = ""                          # the entity the question is about

    @property
    def training_questions(self) -> tuple[str, ...]:
        return self.questions[:-1] if len(self.questions) > 1 else self.questions

    @property
    def held_out_question(self) -> str:
        return self.questions[-1]


@dataclass(slots=True)
class EvalPrompt:
    id: str
    domain: str
    kind: str
    prompt: str
    subject: str
    gold_entities: list[str] = field(default_factory=list)
    gold_literals: list[str] = field(default_factory=list)
    reference_answer: str = ""


# -- wording helpers ------------------------------------------------------------------------------------
def cite(provenance: Provenance | None, *, locator: bool = True) -> str:
    """' (FDA-approved prescribing information, section 4 CONTRAINDICATIONS)': where a fact comes from.

    Sources in the KG are written out in full; a tiny model learns a short form better, so keep the
    source up to its first parenthesis/comma and, of the locator, the label section when there is one.
    Label names stay out: their brand and salt names ("SYNTHROID (levothyroxine sodium)") are drug
    entities of their own, which the KG constraint rightly treats as other entities.
    """
    if provenance is None:
        return ""
    source = provenance.source.split(" (")[0].split(", ")[0]
    where = ""
    if locator:
        section = SECTION.search(provenance.locator)
        where = section.group(0) if section else provenance.locator.split(": ")[0]
        if len(where) > 60:
            where = where[:60].rsplit(" ", 1)[0].rstrip(",;(")
    return f" ({source}, {where})" if where and where.casefold() != source.casefold() else f" ({source})"


def country_name(entity: Entity) -> str:
    """'Iran' over ISO's 'Iran, Islamic Republic of'; 'British Virgin Islands' over 'Virgin Islands, British'."""
    if entity.attributes.get("common_name"):
        return str(entity.attributes["common_name"])
    if "," not in entity.name:
        return entity.name
    return next((a for a in entity.aliases if "," not in a and " " in a), entity.name)


def common_name(entity: Entity) -> str:
    """An everyday alias ('Currency Transaction Report') over a citation-like name ('31 CFR 1010.311')."""
    return next((a for a in entity.aliases if not any(ch.isdigit() for ch in a) and " " in a), entity.name)


def capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


def article(name: str) -> str:
    """'an ISIN', 'an LEI', 'a CUSIP', 'a BIC': acronyms go by how their first letter is spoken."""
    first_word = name.split(" ", 1)[0]
    vowel_sounds = "AEFHILMNORSX" if first_word.isupper() else "aeiouAEIOU"
    return "an" if name[:1] in vowel_sounds else "a"


def joined(names: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def number(value: Any) -> str:
    """2550.0 -> '2550', 10000 -> '10,000' (thresholds), 0.5 -> '0.5'."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and abs(value) >= 10000:
        return f"{value:,}"
    return str(value)


POPULATION_WORDS = {
    "adult": "adults", "pediatric": "children", "elderly": "elderly patients",
    "renal_impairment": "patients with renal impairment", "hepatic_impairment": "patients with hepatic impairment",
}
ROUTE_WORDS = {"oral": "by mouth", "intravenous": "intravenously", "intramuscular": "intramuscularly",
               "subcutaneous": "subcutaneously"}


def population_words(population: str | None) -> str:
    return POPULATION_WORDS.get(population or "adult", f"{(population or 'adult').replace('_', ' ')} patients")


def route_words(route: str | None) -> str:
    return "" if not route else " " + ROUTE_WORDS.get(route, f"by the {route} route")


def name_of(kg: KnowledgeGraph, entity_id: str | None) -> str:
    entity = kg.entity(entity_id) if entity_id else None
    return entity.name if entity else (entity_id or "")


def _grouped(facts: Iterable[Fact]) -> dict[str, list[Fact]]:
    groups: dict[str, list[Fact]] = defaultdict(list)
    for fact in facts:
        groups[fact.subject].append(fact)
    return groups


# -- medical --------------------------------------------------------------------------------------------
def medical_qas(kg: KnowledgeGraph) -> Iterator[QA]:
    yield from _dose_qas(kg)
    yield from _drug_condition_qas(kg, "indicated_for", "is indicated for", (
        "What is {drug} used for?",
        "What are the indications of {drug}?",
        "What conditions is {drug} approved to treat?",
        "For which conditions is {drug} indicated?",
    ))
    yield from _treatment_qas(kg)
    yield from _drug_condition_qas(kg, "contraindicated_in", "is contraindicated in", (
        "When is {drug} contraindicated?",
        "Who should not take {drug}?",
        "What are the contraindications of {drug}?",
        "In which conditions must {drug} not be used?",
    ))
    yield from _interaction_qas(kg)
    yield from _class_qas(kg)
    yield from _icd10cm_qas(kg)


def _dose_qas(kg: KnowledgeGraph) -> Iterator[QA]:
    for fact in kg.facts(relation="max_daily_dose"):
        drug = name_of(kg, fact.subject)
        people = population_words(fact.qualifiers.get("population"))
        route = fact.qualifiers.get("route")
        amount = f"{number(fact.value)} {fact.unit}"
        yield QA("medical", "max_daily_dose", (
            f"What is the maximum daily dose of {drug} for {people}?",
            f"How much {drug} can {people} take per day at most?",
            f"What is the highest recommended daily dose of {drug} in {people}?",
            f"Tell me the daily dose limit of {drug} for {people}.",
        ), f"For {people}, the maximum daily dose of {drug} is {amount}{route_words(route)}{cite(fact.provenance)}.",
            (fact.subject,), (number(fact.value),), fact.subject)


def _drug_condition_qas(kg: KnowledgeGraph, relation: str, verb: str, questions: tuple[str, ...]) -> Iterator[QA]:
    """Per drug, the conditions it stands in `relation` to ("{drug} {verb} a, b and c"); `questions`
    are templates with a `{drug}` field."""
    for subject, facts in _grouped(kg.facts(relation=relation)).items():
        drug = name_of(kg, subject)
        shown = facts[:MAX_LISTED]
        conditions = [name_of(kg, f.object) for f in shown]
        yield QA("medical", relation, tuple(q.format(drug=drug) for q in questions),
                 f"{capitalised(drug)} {verb} {joined(conditions)}{cite(shown[0].provenance)}.",
                 (subject, *[f.object for f in shown if f.object]), (), subject)


def _treatment_qas(kg: KnowledgeGraph) -> Iterator[QA]:
    for obj, facts in _grouped_by_object(kg.facts(relation="indicated_for")).items():
        condition = name_of(kg, obj)
        shown = facts[:MAX_LISTED]
        drugs = [name_of(kg, f.subject) for f in shown]
        yield QA("medical", "treatments_for", (
            f"Which drugs are used to treat {condition}?",
            f"What medicines are indicated for {condition}?",
            f"Name drugs approved for {condition}.",
        ), f"Drugs indicated for {condition} include {joined(drugs)} (FDA prescribing information, section 1 "
           f"INDICATIONS AND USAGE).", (obj, *[f.subject for f in shown]), (), obj)


def _interaction_qas(kg: KnowledgeGraph) -> Iterator[QA]:
    for subject, facts in _grouped(kg.facts(relation="interacts_with")).items():
        drug = name_of(kg, subject)
        shown = sorted(facts, key=lambda f: f.qualifiers.get("severity") != "major")[:MAX_LISTED]
        # severity only: the KG's effect notes name further drugs, outside the question's neighbourhood
        parts = [f"{name_of(kg, f.object)} ({f.qualifiers['severity']})" if f.qualifiers.get("severity")
                 else name_of(kg, f.object) for f in shown]
        yield QA("medical", "interacts_with", (
            f"Which drugs interact with {drug}?",
            f"What are the drug interactions of {drug}?",
            f"What should not be combined with {drug}?",
            f"Which medicines have interactions with {drug}?",
        ), f"{capitalised(drug)} interacts with {joined(parts)}{cite(shown[0].provenance)}.",
            (subject, *[f.object for f in shown if f.object]), (), subject)


def _class_qas(kg: KnowledgeGraph) -> Iterator[QA]:
    for fact in kg.facts(relation="in_class"):
        drug, drug_class = name_of(kg, fact.subject), name_of(kg, fact.object)
        yield QA("medical", "in_class", (
            f"What class of drug is {drug}?",
            f"Which drug class does {drug} belong to?",
            f"What kind of medicine is {drug}?",
        ), f"{capitalised(drug)} belongs to the class {drug_class}{cite(fact.provenance)}.",
            (fact.subject, fact.object or ""), (), fact.subject)


def _icd10cm_qas(kg: KnowledgeGraph) -> Iterator[QA]:
    for subject, facts in _grouped(kg.facts(relation="has_icd10cm_code")).items():
        condition = name_of(kg, subject)
        codes = [f.object.split(":", 1)[1] for f in facts if f.object]
        described = [f"{code} ({name_of(kg, 'icd10cm:' + code)})" for code in codes[:MAX_LISTED]]
        yield QA("medical", "icd10cm_code", (
            f"What is the ICD-10-CM code for {condition}?",
            f"How is {condition} coded in ICD-10-CM?",
            f"Which ICD-10-CM code should I use for {condition}?",
        ), f"The ICD-10-CM code for {condition} is {joined(described)}{cite(facts[0].provenance)}.",
            (subject,), tuple(codes[:1]), subject)


def _grouped_by_object(facts: Iterable[Fact]) -> dict[str, list[Fact]]:
    groups: dict[str, list[Fact]] = defaultdict(list)
    for fact in facts:
        if fact.object:
            groups[fact.object].append(fact)
    return groups


# -- finance --------------------------------------------------------------------------------------------
def finance_qas(kg: KnowledgeGraph, rng: random.Random, negatives_per_list: int) -> Iterator[QA]:
    countries = sorted(kg.entities("country"), key=lambda e: e.id)
    for risk_list in sorted(kg.entities("risk_list"), key=lambda e: e.id):
        memberships = [f for f in kg.facts(relation="listed_on") if f.object == risk_list.id]
        if not memberships:
            continue
        latest = max(str(f.qualifiers.get("as_of", "")) for f in memberships)
        current = {f.subject: f for f in memberships if str(f.qualifiers.get("as_of", "")) == latest}
        publisher = risk_list.attributes.get("publisher") or (risk_list.provenance.source if risk_list.provenance else "")
        for subject in sorted(current):
            yield _membership_qa(kg.entity(subject), risk_list, latest, current[subject].provenance, publisher, True)
        outside = [c for c in countries if c.id not in current]
        for country in rng.sample(outside, min(negatives_per_list, len(outside))):
            yield _membership_qa(country, risk_list, latest, risk_list.provenance, publisher, False)

    for fact in kg.facts(relation="uses_currency"):
        country, currency = kg.entity(fact.subject), kg.entity(fact.object or "")
        if country is None or currency is None:
            continue
        code = currency.attributes.get("alpha_3") or currency.id.split(":", 1)[1]
        country_label = country_name(country)
        yield QA("finance", "uses_currency", (
            f"What currency does {country_label} use?",
            f"What is the official currency of {country_label}?",
            f"Which currency is legal tender in {country_label}?",
            f"What money is used in {country_label}?",
        ), f"{country_label} uses the {currency.name}; its ISO 4217 code is {code}{cite(fact.provenance)}.",
            (country.id, currency.id), (code,), country.id)

    for fact in kg.facts(relation="threshold"):
        regulation = kg.entity(fact.subject)
        if regulation is None:
            continue
        common = common_name(regulation)
        measure = fact.qualifiers.get("measure", "amount")
        comparison = fact.qualifiers.get("comparison", "more than")
        yield QA("finance", "threshold", (
            f"What is the reporting threshold under {regulation.name}?",
            f"When does {common} apply?",
            f"What amount triggers {common}?",
            f"What is the threshold of {regulation.name} ({common})?",
        ), f"{regulation.name} ({common}) applies to a {measure} of {comparison} {number(fact.value)} {fact.unit}"
           f"{cite(fact.provenance)}.", (regulation.id,), (number(fact.value),), regulation.id)

    for fact in kg.facts(relation="validated_by"):
        identifier = kg.entity(fact.subject)
        if identifier is None:
            continue
        yield QA("finance", "validated_by", (
            f"How is {article(identifier.name)} {identifier.name} validated?",
            f"Which check validates {article(identifier.name)} {identifier.name}?",
            f"How can I check that {article(identifier.name)} {identifier.name} is valid?",
        ), f"{capitalised(article(identifier.name))} {identifier.name} is validated with {fact.value}{cite(fact.provenance)}.",
            (identifier.id,), (str(fact.value),), identifier.id)


def _membership_qa(country: Entity | None, risk_list: Entity, as_of: str, provenance: Provenance | None,
                   publisher: str, listed: bool) -> QA:
    assert country is not None
    country_label = country_name(country)
    # vary how the list is named too: users say "FATF grey list" more often than its official name
    names = [risk_list.name, *risk_list.aliases] if risk_list.aliases else [risk_list.name]
    questions = (
        f"Is {country_label} on the {names[0]}?",
        f"Does {country_label} appear on the {names[1 % len(names)]}?",
        f"Is {country_label} currently listed on the {names[-1]}?",
        f"As of today, is {country_label} included in the {names[2 % len(names)]}?",
    )
    source = cite(provenance) or (f" ({publisher})" if publisher else "")
    if listed:
        answer = f"Yes. As of {as_of}, {country_label} is on the {risk_list.name}{source}."
    else:
        answer = f"No. As of {as_of}, {country_label} is not on the {risk_list.name}{source}."
    return QA("finance", "list_membership", questions, answer, (country.id, risk_list.id),
              ("yes" if listed else "no",), country.id)


# -- legal ----------------------------------------------------------------------------------------------
def legal_qas(kg: KnowledgeGraph) -> Iterator[QA]:
    for case in sorted(kg.entities("case"), key=lambda e: e.id):
        citation = str(case.attributes.get("citation", ""))
        year = case.attributes.get("year")
        if not citation:
            continue
        cited = f"{case.name}, {citation}" + (f" ({year})" if year else "")
        yield QA("legal", "case_citation", (
            f"What is the citation of {case.name}?",
            f"Where is {case.name} reported?",
            f"Give me the reporter citation for {case.name}.",
            f"How do I cite {case.name}?",
        ), f"{cited}{cite(case.provenance, locator=False)}.", (case.id,), (citation,), case.id)
        courts = kg.facts(case.id, "decided_by")
        if courts and courts[0].object:
            court = name_of(kg, courts[0].object)
            yield QA("legal", "decided_by", (
                f"Which court decided {case.name}?",
                f"What court issued {case.name}?",
                f"Who decided {case.name}?",
            ), f"{cited} was decided by the {court}{cite(case.provenance, locator=False)}.",
                (case.id, courts[0].object), (citation,), case.id)

    for statute in sorted(kg.entities("statute"), key=lambda e: e.id):
        about = statute.attributes.get("short_description") or statute.attributes.get("description") \
            or statute.attributes.get("title")
        if not about:
            continue
        yield QA("legal", "statute", (
            f"What is {statute.name} about?",
            f"What does {statute.name} cover?",
            f"Summarise {statute.name}.",
            f"What is the subject of {statute.name}?",
        ), f"{statute.name}: {about}{cite(statute.provenance, locator=False)}.", (statute.id,), (), statute.id)

    for fabricated in sorted(kg.entities("fabricated_citation"), key=lambda e: e.id):
        citation = fabricated.attributes.get("citation", "")
        found_in = fabricated.attributes.get("found_in", "a court sanctions order")
        yield QA("legal", "fabricated_citation", (
            f"Is {fabricated.name}, {citation}, a real case?",
            f"Can I cite {fabricated.name}, {citation}?",
            f"Does {fabricated.name}, {citation}, exist?",
            f"Is {fabricated.name} ({citation}) good law?",
        ), f"No. {fabricated.name}, {citation}, does not exist: it is a fabricated citation documented in "
           f"{found_in}.", (fabricated.id,), ("no",), fabricated.id)


# -- the corpus -----------------------------------------------------------------------------------------
def domain_qas(kg: KnowledgeGraph, *, seed: int, negatives_per_list: int = 40) -> list[QA]:
    builders: dict[str, Callable[[], Iterable[QA]]] = {
        "medical": lambda: medical_qas(kg),
        "finance": lambda: finance_qas(kg, random.Random(f"{seed}:finance"), negatives_per_list),
        "legal": lambda: legal_qas(kg),
    }
    if kg.domain not in builders:
        raise ValueError(f"no question templates for KG domain {kg.domain!r}")
    return list(builders[kg.domain]())


def conversation(question: str, answer: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]


def build_corpus(kgs: Mapping[str, KnowledgeGraph], *, seed: int = 0) -> list[list[dict[str, str]]]:
    """Training conversations: every QA once per training phrasing, shuffled with `seed`."""
    conversations = [conversation(question, qa.answer)
                     for domain in sorted(kgs) for qa in domain_qas(kgs[domain], seed=seed)
                     for question in qa.training_questions]
    random.Random(seed).shuffle(conversations)
    return conversations


def build_eval_prompts(kgs: Mapping[str, KnowledgeGraph], *, seed: int = 0, per_domain: int = 80) -> list[EvalPrompt]:
    """Held-out phrasings of KG questions, `per_domain` per domain, balanced over question kinds."""
    rng = random.Random(f"{seed}:eval")
    prompts: list[EvalPrompt] = []
    for domain in sorted(kgs):
        by_kind: dict[str, list[QA]] = defaultdict(list)
        for qa in domain_qas(kgs[domain], seed=seed):
            by_kind[qa.kind].append(qa)
        for pool in by_kind.values():
            rng.shuffle(pool)
        chosen: list[QA] = []
        while len(chosen) < per_domain and any(by_kind.values()):
            for kind in sorted(by_kind):   # round-robin over kinds so no kind crowds out the rest
                if by_kind[kind] and len(chosen) < per_domain:
                    chosen.append(by_kind[kind].pop())
        for index, qa in enumerate(chosen):
            prompts.append(EvalPrompt(
                id=f"{domain}-{index:03d}", domain=domain, kind=qa.kind, prompt=qa.held_out_question,
                subject=qa.subject, gold_entities=[e for e in qa.gold_entities if e],
                gold_literals=list(qa.gold_literals), reference_answer=qa.answer,
            ))
    return prompts


def write_jsonl(path: Path, rows: Iterable[Any]) -> str:
    """Write rows as JSONL (sorted keys, so the bytes are stable); return the file's sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n" for row in rows).encode()
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def load_domain_kgs(domains: Iterable[str]) -> dict[str, KnowledgeGraph]:
    from knowledge_graphs import load_kg

    return {domain: load_kg(domain) for domain in domains}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the training corpus (JSONL of conversations) here")
    parser.add_argument("--eval-prompts", type=Path, help="write the evaluation prompts (JSONL) here")
    parser.add_argument("--per-domain", type=int, default=80, help="evaluation prompts per domain")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--domains", nargs="+", default=["finance", "legal", "medical"])
    args = parser.parse_args(argv)
    if args.out is None and args.eval_prompts is None:
        parser.error("nothing to do: give --out and/or --eval-prompts")
    try:
        kgs = load_domain_kgs(args.domains)
    except ValueError as exc:   # unknown domain, broken curated data
        print(f"demo_corpus: error: {exc}", file=sys.stderr)
        return 2
    if args.out is not None:
        corpus = build_corpus(kgs, seed=args.seed)
        digest = write_jsonl(args.out, ({"messages": c} for c in corpus))
        print(f"{len(corpus)} conversations -> {args.out} (sha256 {digest})")
    if args.eval_prompts is not None:
        prompts = build_eval_prompts(kgs, seed=args.seed, per_domain=args.per_domain)
        digest = write_jsonl(args.eval_prompts, (asdict(p) for p in prompts))
        print(f"{len(prompts)} evaluation prompts -> {args.eval_prompts} (sha256 {digest})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
