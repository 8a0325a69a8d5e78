"""Medical validators: doses with unit/frequency normalisation, indications, interactions, ICD-10-CM."""

import pytest

from rules import verify
from rules.units import find_doses
from tests.rules.kgs import medical_kg


def kinds(text: str, kind: str) -> list[str]:
    return [c.verdict for c in verify(text, "medical", kg=medical_kg()).claims if c.kind == kind]


@pytest.mark.parametrize(
    ("text", "per_day_mg"),
    [
        ("500 mg twice daily", 1000.0),
        ("1 g three times a day", 3000.0),
        ("650 mg every 4-6 hours", 3900.0),    # the most frequent schedule is the worst case
        ("100 mcg once daily", 0.1),
        ("850 mg BID", 1700.0),
        ("do not exceed 4,000 mg per day", 4000.0),
        ("500 mg", None),
    ],
)
def test_daily_amount(text: str, per_day_mg: float | None) -> None:
    [dose] = find_doses(text)
    assert dose.daily_amount == pytest.approx(per_day_mg) if per_day_mg is not None else dose.daily_amount is None


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        # a regimen below the labelled maximum: the maximum does not confirm a usual or starting dose
        ("Metformin 500 mg twice daily is a common starting dose.", "unverifiable"),
        ("Metformin 850 mg three times daily is the most a patient should take.", "supported"),  # 2550/day
        ("Metformin 1000 mg three times daily is appropriate.", "contradicted"),    # 3000 > 2550 mg/day
        ("The maximum daily dose of metformin is 2550 mg.", "supported"),
        ("The maximum daily dose of metformin is 3000 mg.", "contradicted"),
        ("The maximum daily dose of acetaminophen is 4 g.", "supported"),           # g -> mg
        ("Levothyroxine 100 mcg once daily is typical.", "unverifiable"),
        ("Levothyroxine 100 mg once daily is typical.", "contradicted"),            # unit slip: mg for mcg
        ("Lisinopril 40 mg once daily for children.", "unverifiable"),              # no pediatric fact
        ("Acetaminophen 2 g as a single dose.", "contradicted"),                    # above the 1 g single max
    ],
)
def test_doses(text: str, verdict: str) -> None:
    assert kinds(text, "dose") == [verdict]


@pytest.mark.parametrize(
    ("text", "kind", "verdict"),
    [
        ("Metformin is indicated for type 2 diabetes.", "indication", "supported"),
        ("Metformin is indicated for hypertension.", "indication", "contradicted"),   # not a labelled indication
        ("Metformin is sometimes used for hypertension.", "indication", "unverifiable"),
        ("Metformin is contraindicated in metabolic acidosis.", "contraindication", "supported"),
        ("Metformin is safe in metabolic acidosis.", "contraindication", "contradicted"),
        ("Warfarin and aspirin can be safely taken together.", "interaction", "contradicted"),
        ("Warfarin interacts with aspirin, raising bleeding risk.", "interaction", "supported"),
        ("Combining warfarin and aspirin is only a minor interaction.", "interaction", "contradicted"),
        ("Metformin and lisinopril have no known interaction.", "interaction", "unverifiable"),
    ],
)
def test_kg_relations(text: str, kind: str, verdict: str) -> None:
    assert kinds(text, kind) == [verdict]


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("The ICD-10-CM code for type 2 diabetes mellitus without complications is E11.9.", "supported"),
        ("The ICD-10-CM code for essential hypertension is I10.", "supported"),
        ("The ICD-10-CM code for type 2 diabetes is I10.", "contradicted"),
        ("Use ICD-10-CM code E11.99 for this visit.", "contradicted"),        # no such code
        ("E11 is a billable ICD-10-CM code.", "contradicted"),                 # a category, not a leaf
        ("Record diagnosis code J45.909 in the chart.", "unverifiable"),      # valid, nothing to compare
    ],
)
def test_icd10cm(text: str, verdict: str) -> None:
    assert kinds(text, "icd10cm_code") == [verdict]


def test_unknown_drug_name_is_unverifiable_never_contradicted() -> None:
    report = verify("Start Zyntravex 20 mg daily with metformin 500 mg daily.", "medical", kg=medical_kg())
    unknown = [c for c in report.claims if c.kind == "drug_name"]
    assert [(c.text, c.verdict) for c in unknown] == [("Zyntravex", "unverifiable")]


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("For adults, do not exceed 4,000 mg of acetaminophen in 24 hours.", "supported"),
        ("The maximum dose of acetaminophen is 6 g.", "contradicted"),   # above the daily max on any reading
        ("Acetaminophen 1,000 mg every 4 hours is fine.", "contradicted"),   # 6,000 mg/day
        ("Lisinopril 20 mg six times daily is fine.", "contradicted"),       # 120 mg/day
    ],
)
def test_dose_phrasings(text: str, verdict: str) -> None:
    assert kinds(text, "dose") == [verdict]


def test_code_given_for_a_described_condition_it_is_not() -> None:
    # E11.9 is type 2 diabetes; the condition named is hypertension (I10)
    text = "The ICD-10-CM code for essential (primary) hypertension is E11.9."
    assert kinds(text, "icd10cm_code") == ["contradicted"]


def test_prompt_supplies_the_population() -> None:
    # no pediatric maximum in the small KG: judged against the adult label it would be "supported"
    text = "Lisinopril can be taken up to 80 mg once daily."
    assert [c.verdict for c in verify(text, "medical", kg=medical_kg()).claims] == ["supported"]
    asked = verify(text, "medical", kg=medical_kg(), prompt="What lisinopril dose is right for my child?")
    assert [c.verdict for c in asked.claims] == ["unverifiable"]


def test_ordinary_words_before_amounts_are_not_drug_names() -> None:
    text = "Dosage 500 mg twice daily. Then 1000 mg daily. Usually 20 mg. Initially 25 mg daily."
    assert kinds(text, "drug_name") == []
