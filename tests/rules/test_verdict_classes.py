"""Classes of wrong verdicts on chatbot-style answers (issue 19), each tested with new sentences of the class
written for this file (never sentences of the blind sets under benchmarks/data), against the shipped KGs."""

import re

import pytest

from rules import verify


@pytest.fixture(scope="module", autouse=True)
def kgs_load() -> None:
    from knowledge_graphs import load_kg

    for domain in ("finance", "legal", "medical"):
        load_kg(domain)


def claims_of(text: str, domain: str, kind: str, prompt: str | None = None) -> list[tuple[str, str]]:
    return [(c.verdict, c.text) for c in verify(text, domain, prompt=prompt).claims if c.kind == kind]


def verdicts_of(text: str, domain: str, kind: str, prompt: str | None = None) -> set[str]:
    return {verdict for verdict, _ in claims_of(text, domain, kind, prompt)}


# -- "only" with a part of a labelled condition: the label's condition is broader -------------------------
@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Pioglitazone is contraindicated only in NYHA class IV heart failure.", "contradicted"),
        ("Actos (pioglitazone) needs care in heart disease. It is contraindicated only in class III heart failure.",
         "contradicted"),
        ("The one contraindication for pioglitazone is NYHA class IV heart failure.", "contradicted"),
        # the part alone, without "only", is true: class IV is within the labelled condition
        ("Pioglitazone is contraindicated in NYHA class IV heart failure.", "supported"),
        ("Pioglitazone is contraindicated only in NYHA class III or IV heart failure.", "supported"),
    ],
)
def test_only_with_part_of_a_labelled_condition(text: str, verdict: str) -> None:
    assert verdicts_of(text, "medical", "contraindication") == {verdict}


# -- a maximum that the label sets by body weight ------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "prompt", "verdict"),
    [
        # "regardless of weight" denies the label's weight bands
        ("In heart failure carvedilol is capped at 25 mg twice daily whatever the patient's weight.", None,
         "contradicted"),
        ("For heart failure, carvedilol starts low. Its maximum is 50 mg a day irrespective of body weight.", None,
         "contradicted"),
        # the weight in the question selects the band
        ("For heart failure the maximum carvedilol dose is 25 mg twice a day.", "my father weighs 104 kg",
         "contradicted"),
        ("For heart failure the maximum carvedilol dose is 25 mg twice a day.", "she is a 62 kg woman", "supported"),
        ("For heart failure the maximum carvedilol dose is 50 mg twice a day.", "patient is 97 kg", "supported"),
        # the band stated with the dose
        ("In heart failure patients over 85 kg, carvedilol may be raised to a maximum of 50 mg twice daily.", None,
         "supported"),
        # one band's maximum with no weight anywhere confirms nothing
        ("In heart failure, the highest carvedilol dose is 25 mg twice daily.", None, "unverifiable"),
    ],
)
def test_weight_banded_maximum(text: str, prompt: str | None, verdict: str) -> None:
    assert verdicts_of(text, "medical", "dose", prompt) == {verdict}


def test_a_dose_in_mg_per_kg_is_no_body_weight() -> None:
    from rules.validators.medical.context import stated_weight

    assert stated_weight("give 15 mg/kg every 6 hours") is None
    assert stated_weight("a 70-kg adult") == 70
    assert stated_weight("for patients over 85 kg") == pytest.approx(85.01)


def test_the_indication_of_the_drug_sentence_carries_to_the_next() -> None:
    text = "For heart failure, carvedilol is begun at 3.125 mg twice daily. The maximum is 25 mg twice daily " \
           "regardless of body weight."
    assert ("contradicted", "25 mg twice daily") in claims_of(text, "medical", "dose")


# -- a resolving section with the wrong subject, next to the right act (pattern 13) -------------------------
@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Under the Administrative Procedure Act, judges overturn arbitrary and capricious agency decisions "
         "under 5 U.S.C. § 553.", "contradicted"),
        ("Per the APA, a reviewing court sets aside arbitrary and capricious agency action under 5 U.S.C. § 553, "
         "and that is the heart of the statute.", "contradicted"),
        ("Agencies follow notice-and-comment rulemaking, and a court reviews arbitrary and capricious agency "
         "action under 5 U.S.C. § 553.", "contradicted"),
    ],
)
def test_the_right_act_does_not_support_the_wrong_subject(text: str, verdict: str) -> None:
    assert verdict in verdicts_of(text, "legal", "statute")


@pytest.mark.parametrize("text", [
    "Under the Administrative Procedure Act, judges overturn arbitrary and capricious agency decisions under "
    "5 U.S.C. § 706.",
    "ERISA plan participants usually sue under 29 U.S.C. § 1132(a)(1)(B).",
    "Benefit claims are typically brought under 29 U.S.C. § 1132.",
])
def test_the_right_subject_or_no_subject_is_no_alarm(text: str) -> None:
    assert "contradicted" not in verdicts_of(text, "legal", "statute")


def test_a_coordinated_clause_after_any_verb_is_its_own_clause() -> None:
    from knowledge_graphs import load_kg
    from rules.claims import Document

    text = "Courts set aside unlawful agency action under § 706, and rulemaking is in § 553."
    doc = Document(text=text, domain="legal", kg=load_kg("legal"))
    assert len(doc.clauses(doc.segments[0])) == 2
    # a leading phrase without a verb stays with its clause
    doc = Document(text="For adults over 65, the maximum is 20 mg.", domain="medical", kg=None)
    assert len(doc.clauses(doc.segments[0])) == 1


# -- what a case held, stated in prose (legal.case_holding) ---------------------------------------------------
@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        # a label, a verb after the name (with its citation and year), a source after the description
        ("Katz v. United States: a reasonable expectation of privacy marks a Fourth Amendment search.", "supported"),
        ("Batson v. Kentucky, 476 U.S. 79 (1986), barred prosecutors from striking jurors because of their race.",
         "supported"),
        ("Judges as gatekeepers for scientific expert testimony come from Daubert v. Merrell Dow Pharmaceuticals.",
         "supported"),
        ("Riley v. California held that police need a warrant to search the data on an arrestee's cell phone.",
         "supported"),
        # another case's holding credited to the case
        ("Gideon v. Wainwright: the fraud-on-the-market presumption of reliance.", "contradicted"),
        ("Miranda v. Arizona held that flag burning is expressive conduct protected by the First Amendment.",
         "contradicted"),
        ("The actual malice rule for libel suits by public officials comes from Tinker v. Des Moines.", "contradicted"),
        # the holding reversed, negated, or the rejected proposition stated
        ("Pearson v. Callahan required courts to always decide the constitutional question first.", "contradicted"),
        ("Loving v. Virginia upheld state bans on interracial marriage.", "contradicted"),
        ("Obergefell v. Hodges did not require states to license same-sex marriages.", "contradicted"),
        ("Erie Railroad Co. v. Tompkins told federal courts in diversity to apply federal general common law.",
         "contradicted"),
        # the right holding on the wrong amendment
        ("Gideon v. Wainwright held that the Fifth Amendment right to counsel applies to the states.", "contradicted"),
    ],
)
def test_case_holdings(text: str, verdict: str) -> None:
    assert verdicts_of(text, "legal", "case_holding") == {verdict}


@pytest.mark.parametrize("text", [
    "Marbury v. Madison is a famous case.",                       # nothing said of the holding
    "Terry v. Ohio is often taught in the first week of criminal procedure.",
    "Palsgraf v. Long Island Railroad Co. is about a train platform and a box of fireworks that exploded.",
])
def test_no_holding_claim_without_a_holding_description(text: str) -> None:
    assert verdicts_of(text, "legal", "case_holding") <= {"unverifiable"}


def test_a_holding_claim_spans_the_description_not_the_case_or_year() -> None:
    text = "Mapp v. Ohio (1961) applied the exclusionary rule to the states."
    assert claims_of(text, "legal", "case_holding") == [("supported", "applied the exclusionary rule to the states")]


# -- a bare "§ N" takes its U.S. Code title from "Title N" in the text or a title the question names ------------
@pytest.mark.parametrize(
    ("text", "prompt", "verdict"),
    [
        ("Patent basics from Title 35:\n- § 102: novelty\n- § 103: obviousness", None, "supported"),
        ("From Title 35, § 101 covers what inventions are patentable.", None, "supported"),
        ("Quick list:\n- § 1332: federal question jurisdiction", "the 28 U.S.C. sections on jurisdiction?",
         "contradicted"),
        ("Quick list:\n- § 1367: supplemental jurisdiction", "what's in 28 USC about jurisdiction", "supported"),
    ],
)
def test_a_bare_section_takes_the_title_named_elsewhere(text: str, prompt: str | None, verdict: str) -> None:
    assert verdict in verdicts_of(text, "legal", "statute", prompt)
    assert "contradicted" not in verdicts_of(text, "legal", "statute", prompt) or verdict == "contradicted"


def test_title_vii_is_no_code_title() -> None:
    from rules.validators.legal.provisions import _TITLE_WORDS

    assert _TITLE_WORDS.search("Title VII of the Civil Rights Act") is None
    assert _TITLE_WORDS.search("see 18 U.S.C. generally").group("usc") == "18"


# -- a cash-threshold regulation described, not named ------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Travellers bringing more than $10,000 in currency into the United States have to report it.", "supported"),
        ("If you carry more than five thousand dollars out of the U.S. you must file a report.", "contradicted"),
        ("Cash entering or leaving the EU must be declared at €10,000 or more.", "supported"),
        ("People crossing into the EU with cash must declare it from €15,000.", "contradicted"),
        ("Under the EU rules, traders cannot accept cash payments for goods above €10,000.", "supported"),
    ],
)
def test_a_described_cash_regulation(text: str, verdict: str) -> None:
    assert verdicts_of(text, "finance", "threshold") == {verdict}


@pytest.mark.parametrize("text", [
    "We carried two suitcases across the border into Canada.",     # no amount, no claim
    "Dealers in the market take cash for fruit all day.",           # no EU, no amount
])
def test_no_threshold_claim_without_an_amount(text: str) -> None:
    assert verdicts_of(text, "finance", "threshold") == set()


def test_more_than_before_the_amount_states_the_rule_not_a_consequence() -> None:
    assert verdicts_of("Anyone transporting more than $10,000 across the US border must declare it.", "finance",
                       "threshold") == {"supported"}
    assert verdicts_of("Carrying exactly $10,000 into the US must be declared.", "finance", "threshold") == {
        "contradicted"}


# -- a drug's original US approval date (medical.approval) -----------------------------------------------------
@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Cymbalta (duloxetine) won FDA approval in August 2004.", "supported"),
        ("The FDA approved Plavix in 1997, and it became a blockbuster.", "supported"),
        ("Januvia was approved in the autumn of 2006.", "supported"),
        ("Viagra was approved by the FDA in nineteen ninety-five.", "contradicted"),
        ("Crestor was first approved on 2003-02-12.", "contradicted"),       # right year, wrong month
        ("Pradaxa got its US approval in late 2012.", "contradicted"),
    ],
)
def test_original_approval_dates(text: str, verdict: str) -> None:
    assert verdicts_of(text, "medical", "approval_date") == {verdict}


@pytest.mark.parametrize("text", [
    "Xarelto was approved for stroke prevention in atrial fibrillation in November 2011.",   # an indication
    "A generic version of Lipitor was approved in 2011.",                                  # a generic
    "Januvia was approved in Europe in 2007.",                                             # another agency
])
def test_a_later_or_other_approval_is_not_the_original(text: str) -> None:
    assert verdicts_of(text, "medical", "approval_date") <= {"unverifiable"}


def test_the_approval_cue_belongs_to_its_own_date() -> None:
    text = "Zocor (simvastatin) was approved in December 1991 and launched the next spring, in 1992."
    assert verdicts_of(text, "medical", "approval_date") == {"supported"}


# -- a currency the country gave up is no claim that it uses it ------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("El Salvador uses the US dollar after it dropped the colón in 2001.", {"supported"}),
        ("Montenegro has used the euro since it abandoned the Deutsche Mark.", {"supported"}),
        ("Zimbabwe uses the euro.", {"contradicted"}),
    ],
)
def test_an_abandoned_currency_is_not_a_use_claim(text: str, expected: set[str]) -> None:
    assert verdicts_of(text, "finance", "country_currency") == expected


# -- a holding stated in the next sentence, with "It" / "The Court" / "The decision" as subject -----------------
@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Marbury v. Madison dates from 1803. It established judicial review of acts of Congress.", "supported"),
        ("Griswold v. Connecticut is from 1965. The Court struck down a ban on contraceptives for married couples.",
         "supported"),
        ("Roe v. Wade was decided in 1973. The Court held that flag burning is protected expressive conduct.",
         "contradicted"),
        ("Bostock v. Clayton County came out in 2020. The decision did not address transgender workers.",
         "contradicted"),
    ],
)
def test_a_holding_in_the_next_sentence(text: str, verdict: str) -> None:
    assert verdicts_of(text, "legal", "case_holding") == {verdict}


def test_a_not_inside_the_holding_is_no_negation_of_it() -> None:
    text = ("Crawford v. Washington, 541 U.S. 36 (2004). It held that testimonial hearsay of a witness who did not "
            "testify is inadmissible under the Confrontation Clause unless there was prior cross-examination.")
    assert "contradicted" not in verdicts_of(text, "legal", "case_holding")


@pytest.mark.parametrize("text", [
    "The plausibility pleading standard comes from Twombly and from Ashcroft v. Iqbal.",
    "The summary judgment standard comes from Celotex Corp. v. Catrett and Anderson v. Liberty Lobby.",
])
def test_cases_named_together_share_the_description(text: str) -> None:
    assert "contradicted" not in verdicts_of(text, "legal", "case_holding")


def test_the_main_label_of_a_drug_is_the_same_in_every_process() -> None:
    """Two labels with one maximum each (VIAGRA 100 mg, REVATIO 60 mg): the tie goes to the label listed first,
    whatever PYTHONHASHSEED is (a set's order decided it before)."""
    import subprocess
    import sys

    code = ("from rules import verify; print(verify('The top daily sildenafil dose for adults is 100 mg.', "
            "'medical').claims[0].verdict)")
    verdicts = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                               env={**__import__("os").environ, "PYTHONHASHSEED": str(seed)}).stdout.strip()
                for seed in (1, 2, 3)}
    assert verdicts == {"supported"}


# -- identifiers credited to an issuer: the curated issuer register ------------------------------------------
@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        # registered to the issuer named (CUSIP and SEDOL derived from the registered ISIN)
        ("For reference, Pfizer Inc.'s CUSIP is 717081103.", "supported"),
        ("Here is the one you asked for. The ISIN of Allianz SE is DE0008404005.", "supported"),
        ("- Morgan Stanley: IGJSJL3JD5P30I6NJZ34", "supported"),
        ("AstraZeneca's SEDOL is 0989529 on the London market.", "supported"),
        # registered to another issuer
        ("The ISIN for Novartis AG is CH0038863350.", "contradicted"),
        ("Bank of America's LEI is 784F5XWPLTWKTBV3E584.", "contradicted"),
        ("| Walmart | US4781601046 |", "contradicted"),
        # another share class of the same issuer
        ("Berkshire Hathaway Class A shares carry ISIN US0846707026.", "contradicted"),
        # a legal entity has one LEI
        ("Citigroup Inc.'s LEI is 529900T8BM49AURSDO55.", "contradicted"),
        # an issuer the register does not hold, or a name it cannot place
        ("Fabrikam Holdings' ISIN is US0378331005.", "unverifiable"),
        ("Tesla's 2030 bond ISIN is US88160RAK77.", "unverifiable"),
    ],
)
def test_identifier_credited_to_an_issuer(text: str, verdict: str) -> None:
    verdicts = verdicts_of(text, "finance", "identifier")
    assert verdict in verdicts and (verdict != "supported" or verdicts == {"supported"})


def test_its_identifier_takes_the_issuer_named_before() -> None:
    text = "Cisco Systems, Inc. is listed on Nasdaq. Its ISIN is US17275R1023, and its LEI is not given here."
    assert verdicts_of(text, "finance", "identifier") == {"supported"}
    text = "Intel is a chipmaker. Its CUSIP is 007903107."
    assert verdicts_of(text, "finance", "identifier") == {"contradicted"}


def test_a_bank_and_its_parent_are_not_told_apart() -> None:
    # 021000021 belongs to JPMorgan Chase Bank, N.A.; crediting it to the holding company is not judged
    assert verdicts_of("JPMorgan Chase & Co.'s routing number is 021000021.", "finance", "identifier") == {"unverifiable"}


# -- the EU AML directive's thresholds described in words (not the AMLR cash cap) ----------------------------
@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Under EU anti-money laundering rules, traders in goods become obliged entities once they receive cash of "
         "€10,000 or more.", "supported"),
        ("In the EU, dealers in goods are covered by the AML directive for cash above €10,000.", "contradicted"),
        ("Under the EU AML directive, occasional transactions need customer due diligence from €15,000.", "supported"),
        ("Banks in the EU must run due diligence on occasional transactions of more than fifteen thousand euros.",
         "contradicted"),
        ("EU banks must run due diligence on occasional transactions of €15,000 or more.", "supported"),
        # a cap stays the AMLR's
        ("Once the AMLR applies, EU traders in goods cannot accept cash above €10,000.", "supported"),
    ],
)
def test_the_eu_aml_directive_described(text: str, verdict: str) -> None:
    assert verdicts_of(text, "finance", "threshold") == {verdict}


# -- aggregation rules stated in words -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("A bank treats several cash withdrawals by one customer on a single business day as one transaction for "
         "currency transaction reporting.", "supported"),
        ("Cash deposits made on the same business day by the same person are aggregated.", "supported"),
        ("Each cash deposit is looked at separately, even if you make several on one business day.", "contradicted"),
        ("For the FBAR, the balances of all your foreign accounts are added together.", "supported"),
        ("The FBAR test applies to each foreign account individually.", "contradicted"),
        ("The FBAR is about your foreign accounts in total, not each one on its own.", "supported"),
    ],
)
def test_aggregation_stated_in_words(text: str, verdict: str) -> None:
    assert verdicts_of(text, "finance", "threshold") == {verdict}


def test_no_aggregation_claim_without_a_rule() -> None:
    assert verdicts_of("We combined the two spreadsheets into one before the audit.", "finance", "threshold") == set()


# -- the statute a conduct is a crime under --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Breaking deposits into smaller amounts is called structuring, and it is illegal under 31 U.S.C. 5324.",
         "supported"),
        ("Structuring is a federal offense under 31 U.S.C. § 5316.", "contradicted"),
        ("Splitting cash to dodge a report is structuring. That conduct is a crime under 31 USC 5313.", "contradicted"),
    ],
)
def test_the_statute_a_conduct_is_a_crime_under(text: str, verdict: str) -> None:
    assert verdicts_of(text, "finance", "regulation") == {verdict}


def test_a_statute_carries_the_threshold_of_its_regulation() -> None:
    text = "31 U.S.C. 5313 requires reports for cash transactions of more than $10,000."
    assert verdicts_of(text, "finance", "threshold") == {"supported"}


# -- decision dates: month and day against the curated decision date; a date that is the whole answer ---------
@pytest.mark.parametrize(
    ("text", "prompt", "verdict"),
    [
        ("Roe v. Wade was decided on January 22, 1973.", None, "supported"),
        ("Miranda v. Arizona came down in July 1966.", None, "contradicted"),
        ("Kelo v. City of New London was handed down in June 2005.", None, "supported"),
        ("1954-05-17. Brown v. Board of Education, 347 U.S. 483.", None, "supported"),
        ("May 18, 1954. Brown v. Board of Education ended school segregation.", None, "contradicted"),
        ("March 18, 1963.", "what day was gideon v. wainwright decided", "supported"),
    ],
)
def test_decision_dates(text: str, prompt: str | None, verdict: str) -> None:
    assert verdicts_of(text, "legal", "case_year", prompt) == {verdict}


def test_a_bare_date_with_no_case_makes_no_claim() -> None:
    assert verdicts_of("June 26, 2015. It was a warm day.", "legal", "case_year") == set()


# -- what a provision is said to cover: the clause's own description, one alias's words, one of two references --
@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        # a framing label before the colon is not the description
        ("They differ in who may use them: 28 U.S.C. § 2255 is a motion by federal prisoners to correct a sentence.",
         "supported"),
        ("Sure: the teller's branch files a Currency Transaction Report under 31 U.S.C. § 5313.", "supported"),
        # described in the words of one alias or subject-matter line, however long the others are
        ("Federal-question jurisdiction comes from 28 U.S.C. § 1331.", "supported"),
        # the second of two references takes the words after the first
        ("Access is Article 15 and the right to rectification is Article 16.", "supported"),
        ("Erasure is Article 17 and the right to object is Article 22.", "contradicted"),
    ],
)
def test_what_a_provision_is_said_to_cover(text: str, verdict: str) -> None:
    prompt = "GDPR articles" if "Article" in text else None
    verdicts = {v for v, t in claims_of(text, "legal", "statute", prompt) if "Article 17" not in t}
    assert verdict in verdicts and (verdict == "contradicted" or "contradicted" not in verdicts)


def test_a_descriptive_label_still_describes() -> None:
    assert verdicts_of("- Right to data portability: Art. 20", "legal", "statute", "gdpr rights") == {"supported"}
    assert verdicts_of("- Right to erasure: Art. 20", "legal", "statute", "gdpr rights") == {"contradicted"}


# -- the court of a known case: a citation's parenthetical, "a judge in the <district>" ------------------------
@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Judge Hand's opinion is United States v. Carroll Towing Co., 159 F.2d 169 (2d Cir. 1947).", "supported"),
        ("See United States v. Carroll Towing Co., 159 F.2d 169 (7th Cir. 1947).", "contradicted"),
        ("Mata v. Avianca, Inc. is the ChatGPT case. A district judge in the Southern District of New York fined the "
         "lawyers.", "supported"),
        ("Mata v. Avianca, Inc. is the ChatGPT case. A federal judge in the Northern District of California fined the "
         "lawyers.", "contradicted"),
    ],
)
def test_the_court_of_a_known_case(text: str, verdict: str) -> None:
    assert verdicts_of(text, "legal", "case_court") == {verdict}


def test_a_district_courts_db_spells_without_its_final_dot_exists() -> None:
    assert verdicts_of("The case was filed in the Eastern District of New York.", "legal", "court_name") == set()
    assert verdicts_of("The case was filed in the Central District of New York.", "legal", "court_name") == {"contradicted"}


# -- a provision's numbers stated after its clause or in the next sentence --------------------------------------
@pytest.mark.parametrize(
    ("text", "prompt", "verdict"),
    [
        ("Under Fed. R. Civ. P. 65(b)(2), an ex parte TRO expires when the court says, which cannot be more than "
         "twenty-eight days.", None, "contradicted"),
        ("Fed. R. Civ. P. 11(c)(2) has a safe harbor. The motion is served but not filed until the other side has had "
         "21 days to withdraw or correct the paper.", None, "supported"),
        ("Article 8 sets the default age of consent at 16. Member States may set a lower age, but not below 14.",
         "gdpr children", "contradicted"),
        ("Article 12(3) gives one month to answer. That period can be extended by three further months.",
         "gdpr access request", "contradicted"),
    ],
)
def test_values_stated_away_from_the_reference(text: str, prompt: str | None, verdict: str) -> None:
    assert verdict in verdicts_of(text, "legal", "statute_value", prompt)


def test_values_of_another_reference_or_a_range_end_are_not_taken() -> None:
    text = "The 2% figure is the lower tier under Article 83(4); the upper tier in Article 83(5) goes to EUR 20 million."
    assert "contradicted" not in verdicts_of(text, "legal", "statute_value", "gdpr fines")
    text = ("Article 12(3) gives one month to answer requests. That can be extended by two further months for complex "
            "requests, so expect one to three months in all.")
    assert verdicts_of(text, "legal", "statute_value", "gdpr access request") == {"supported"}


# -- an EU instrument's number and dates -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Europe's privacy law, the GDPR (Regulation (EU) 2016/679), replaced the 1995 directive.", "supported"),
        ("The General Data Protection Regulation is Regulation (EU) 2018/1725.", "contradicted"),
        ("The GDPR was adopted in April 2016.", "supported"),
        ("The GDPR became enforceable on 25 May 2017.", "contradicted"),
        ("The GDPR entered into force in May 2016 and has applied since 25 May 2018.", "supported"),
        ("The GDPR came into force in 2019.", "contradicted"),
    ],
)
def test_an_eu_instruments_number_and_dates(text: str, verdict: str) -> None:
    verdicts = {v for v, t in claims_of(text, "legal", "statute") if re.search(r"\d{4}", t)}
    assert verdict in verdicts and (verdict == "contradicted" or "contradicted" not in verdicts)


# -- holdings in other shapes: "Under <case>, <rule>", "Justice X wrote for the Court that", a second clause ----
@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Under Terry v. Ohio, 392 U.S. 1 (1968), police may stop and frisk a person on reasonable suspicion that "
         "the person is armed and dangerous.", "supported"),
        ("The case is Mapp v. Ohio (1961). Justice Tom C. Clark wrote for the Court that the exclusionary rule "
         "applies to evidence seized by the states.", "supported"),
        ("In Gideon v. Wainwright (1963), the Court held that states must provide counsel to poor felony "
         "defendants, but the decision did not address the right to counsel for felony defendants.", "contradicted"),
    ],
)
def test_holdings_in_other_shapes(text: str, verdict: str) -> None:
    assert verdict in verdicts_of(text, "legal", "case_holding")


def test_a_second_clause_about_another_case_is_not_this_ones() -> None:
    text = ("In Gideon v. Wainwright (1963), the Court held that states must provide counsel to poor felony "
            "defendants, while Miranda v. Arizona addressed warnings before custodial interrogation.")
    assert "contradicted" not in verdicts_of(text, "legal", "case_holding")


# -- the pairing of a section and an act is one claim spanning both; a parenthetical reference closes its clause --
def test_the_act_claim_spans_the_section_and_the_act() -> None:
    claims = claims_of("15 U.S.C. § 1692 is the Fair Debt Collection Practices Act, which limits collectors.", "legal",
                       "statute")
    assert any("Act" in text and "1692" in text for _, text in claims)


def test_a_parenthetical_reference_takes_the_clause_it_closes() -> None:
    claims = claims_of("People may have their personal data erased when it is no longer needed (Article 17).",
                       "legal", "statute", "gdpr")
    assert claims and all("erased" in text for _, text in claims)
    assert {v for v, _ in claims} <= {"supported", "unverifiable"}


def test_hours_before_the_number() -> None:
    assert verdicts_of("Under 29 U.S.C. § 207, overtime is owed for hours worked beyond 35 in a workweek.", "legal",
                       "statute_value") == {"contradicted"}
