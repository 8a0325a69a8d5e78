"""Small hand-built KGs in the agreed schema, so validator tests do not depend on the full curated data."""

from __future__ import annotations

from knowledge_graphs.model import Entity, Fact, KnowledgeGraph, Provenance

LABEL = Provenance("FDA label (DailyMed)", "2 DOSAGE AND ADMINISTRATION", "2024-01-01")
FATF = Provenance("FATF plenary outcomes", "https://www.fatf-gafi.org/", "2025-06-13")
FINCEN = Provenance("eCFR", "31 CFR 1010.311", "2025-01-01")
COURT = Provenance("U.S. Reports", "official reporter", "2025-01-01")
MATA = Provenance("Mata v. Avianca, Inc., No. 22-cv-1461 (PKC) (S.D.N.Y. June 22, 2023)", "Opinion and Order on Sanctions",
                  "2023-06-22")


def medical_kg() -> KnowledgeGraph:
    entities = [
        Entity("drug:DB00331", "drug", "Metformin", ["metformin hydrochloride", "Glucophage"]),
        Entity("drug:DB00316", "drug", "Acetaminophen", ["paracetamol", "Tylenol"]),
        Entity("drug:DB00682", "drug", "Warfarin", ["Coumadin"]),
        Entity("drug:DB00945", "drug", "Aspirin", ["acetylsalicylic acid"]),
        Entity("drug:DB00451", "drug", "Levothyroxine", ["Synthroid"]),
        Entity("drug:DB00722", "drug", "Lisinopril", []),
        Entity("condition:type-2-diabetes", "condition", "type 2 diabetes mellitus", ["type 2 diabetes", "T2DM"],
               {"icd10cm": ["E11"]}),
        Entity("condition:hypertension", "condition", "hypertension", ["high blood pressure"], {"icd10cm": ["I10"]}),
        Entity("condition:metabolic-acidosis", "condition", "metabolic acidosis", ["diabetic ketoacidosis"],
               {"icd10cm": ["E87.2"]}),
    ]
    facts = [
        Fact("drug:DB00331", "max_daily_dose", value=2550, unit="mg",
             qualifiers={"route": "oral", "population": "adult"}, provenance=LABEL),
        Fact("drug:DB00316", "max_daily_dose", value=4000, unit="mg",
             qualifiers={"route": "oral", "population": "adult"}, provenance=LABEL),
        Fact("drug:DB00316", "max_single_dose", value=1000, unit="mg",
             qualifiers={"route": "oral", "population": "adult"}, provenance=LABEL),
        Fact("drug:DB00722", "max_daily_dose", value=80, unit="mg",
             qualifiers={"route": "oral", "population": "adult"}, provenance=LABEL),
        Fact("drug:DB00451", "max_daily_dose", value=300, unit="mcg",
             qualifiers={"route": "oral", "population": "adult"}, provenance=LABEL),
        Fact("drug:DB00331", "indicated_for", "condition:type-2-diabetes", provenance=LABEL),
        Fact("drug:DB00722", "indicated_for", "condition:hypertension", provenance=LABEL),
        Fact("drug:DB00331", "contraindicated_in", "condition:metabolic-acidosis", provenance=LABEL),
        Fact("drug:DB00682", "interacts_with", "drug:DB00945",
             qualifiers={"severity": "major", "effect": "increased bleeding risk"}, provenance=LABEL),
    ]
    return KnowledgeGraph("medical", entities, facts, data_version="test")


def finance_kg() -> KnowledgeGraph:
    entities = [
        Entity("country:IR", "country", "Iran, Islamic Republic of", ["Iran", "IRN"]),
        Entity("country:KP", "country", "Korea, Democratic People's Republic of", ["North Korea", "DPRK", "PRK"]),
        Entity("country:DE", "country", "Germany", ["DEU"]),
        Entity("country:BG", "country", "Bulgaria", ["BGR"]),
        Entity("country:JP", "country", "Japan", ["JPN"]),
        Entity("currency:EUR", "currency", "Euro", ["EUR"]),
        Entity("currency:JPY", "currency", "Yen", ["JPY", "Japanese yen"]),
        Entity("list:fatf_call_for_action", "risk_list", "FATF High-Risk Jurisdictions subject to a Call for Action",
               ["FATF black list"], provenance=FATF),
        Entity("list:fatf_increased_monitoring", "risk_list", "FATF Jurisdictions under Increased Monitoring",
               ["FATF grey list"], provenance=FATF),
        Entity("regulation:ctr", "regulation", "31 CFR 1010.311", ["Currency Transaction Report", "CTR"]),
    ]
    facts = [
        Fact("country:DE", "uses_currency", "currency:EUR", provenance=FATF),
        Fact("country:JP", "uses_currency", "currency:JPY", provenance=FATF),
        Fact("country:IR", "listed_on", "list:fatf_call_for_action", qualifiers={"as_of": "2025-06-13"}, provenance=FATF),
        Fact("country:KP", "listed_on", "list:fatf_call_for_action", qualifiers={"as_of": "2025-06-13"}, provenance=FATF),
        Fact("country:BG", "listed_on", "list:fatf_increased_monitoring", qualifiers={"as_of": "2025-06-13"},
             provenance=FATF),
        Fact("country:BG", "listed_on", "list:fatf_increased_monitoring", qualifiers={"as_of": "2024-02-23"},
             provenance=FATF),
        Fact("regulation:ctr", "threshold", value=10000, unit="USD",
             qualifiers={"measure": "cash transaction amount", "comparison": "more than"}, provenance=FINCEN),
    ]
    return KnowledgeGraph("finance", entities, facts, data_version="test")


def legal_kg() -> KnowledgeGraph:
    entities = [
        Entity("case:brown-v-board", "case", "Brown v. Board of Education", [],
               {"citation": "347 U.S. 483", "volume": 347, "reporter": "U.S.", "page": 483, "year": 1954,
                "court": "scotus"}, COURT),
        Entity("case:miranda-v-arizona", "case", "Miranda v. Arizona", [],
               {"citation": "384 U.S. 436", "volume": 384, "reporter": "U.S.", "page": 436, "year": 1966,
                "court": "scotus"}, COURT),
        Entity("fabricated:varghese", "fabricated_citation", "Varghese v. China Southern Airlines Co.", [],
               {"citation": "925 F.3d 1339", "found_in": "Mata v. Avianca, Inc., No. 22-cv-1461 (S.D.N.Y. 2023)"}, MATA),
        Entity("statute:42-usc-1983", "statute", "42 U.S.C. § 1983", ["42 USC 1983", "Section 1983"],
               {"title": "Civil action for deprivation of rights"}, COURT),
        Entity("statute:18-usc-1030", "statute", "18 U.S.C. § 1030", ["Computer Fraud and Abuse Act", "CFAA"],
               {"title": "Fraud and related activity in connection with computers"}, COURT),
        Entity("statute:frcp-12", "statute", "Fed. R. Civ. P. 12", [], {"title": "Defenses and objections"}, COURT),
    ]
    facts = [
        Fact("fabricated:varghese", "fabrication_documented_in",
             value="Opinion and Order on Sanctions: the cited decision does not exist", provenance=MATA),
    ]
    return KnowledgeGraph("legal", entities, facts, data_version="test")
