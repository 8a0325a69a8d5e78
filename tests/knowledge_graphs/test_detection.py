"""Domain detection on the real KGs and the shipped classifier, with sentences written for this test (none of
them is in a benchmark file or in the classifier's training texts)."""

from __future__ import annotations

import pytest

from knowledge_graphs import load_kg
from knowledge_graphs.detection import DomainDetector
from knowledge_graphs.detection.detector import split_for_detection
from knowledge_graphs.detection.evidence import KgEvidence, is_common_word
from knowledge_graphs.detection.train import read_training_texts

DOMAINS = ("finance", "legal", "medical")


@pytest.fixture(scope="module")
def detector() -> DomainDetector:
    return DomainDetector({d: load_kg(d) for d in DOMAINS})


MEDICAL = [
    ("is 40 mg of rosuvastatin too much?", "Rosuvastatin tops out at 40 mg once daily, and that dose is kept for "
     "people who did not reach their LDL goal on 20 mg."),
    ("can I take naproxen with my blood thinner", "Naproxen adds to the bleeding risk of anticoagulants such as "
     "rivaroxaban, so ask your prescriber before combining them."),
    ("what's the ICD-10 code for migraine without aura", "G43.009 is migraine without aura, not intractable, "
     "without status migrainosus."),
    ("how should I taper off venlafaxine?", "Please don't stop it on your own; your doctor can lower the dose in "
     "small steps over several weeks to avoid discontinuation symptoms."),
]
LEGAL = [
    ("who decided Loving v. Virginia", "Loving v. Virginia, 388 U.S. 1 (1967), struck down bans on interracial "
     "marriage under the Fourteenth Amendment."),
    ("can my employer read my work email", "Generally yes in the US, because the Electronic Communications Privacy "
     "Act has a business-use exception, but some states require notice."),
    ("what is adverse possession", "It lets someone gain title to land by open, continuous and hostile possession "
     "for the period a state's statute sets, often ten to twenty years."),
    ("do I need a lawyer for small claims?", "I'm not able to advise on your case; a legal aid clinic can tell you "
     "how your county's small claims court works."),
]
FINANCE = [
    ("what is the ISO code of the Mexican peso", "The Mexican peso is MXN, numeric code 484."),
    ("how long is an Italian IBAN", "Italian IBANs have 27 characters and begin with IT followed by two check digits."),
    ("is Haiti on the FATF grey list?", "Haiti is under increased monitoring by the FATF, so payments linked to it "
     "need enhanced due diligence."),
    ("when does a casino file a CTR", "A casino files a currency transaction report for cash in or out of more "
     "than $10,000 in one gaming day."),
]
OFF_DOMAIN = [
    ("how do I get crispy roast potatoes", "Parboil them for eight minutes, rough them up in the pan, then roast "
     "in hot oil at 220 °C for about 45 minutes, turning once."),
    ("which planet has the longest day", "Venus: one rotation takes about 243 Earth days, longer than its year."),
    ("tips for a first marathon", "Build your long run gradually, practise your race-day breakfast and start "
     "slower than you think you should."),
    ("how do I center a div", "Give the parent display: flex with justify-content: center and align-items: center."),
    ("best board games for two", "Patchwork, Jaipur and 7 Wonders Duel are all quick and great with two players."),
    ("what does a court jester do", "In medieval courts a jester entertained the king with songs, jokes and "
     "juggling, and could sometimes mock the powerful without punishment."),
]


def test_domain_texts_are_detected(detector: DomainDetector) -> None:
    """New sentences of each domain, judged together: a detector is right most of the time, not always, so one
    miss in twelve is tolerated and named (today "can my employer read my work email", legal, scores low)."""
    cases = [(p, a, "medical") for p, a in MEDICAL] + [(p, a, "legal") for p, a in LEGAL] + \
        [(p, a, "finance") for p, a in FINANCE]
    misses = [(prompt, detector.detect(prompt, answer).scores) for prompt, answer, domain in cases
              if detector.detect(prompt, answer).top != domain]
    assert len(misses) <= 1, misses


def test_off_domain_chat_is_rarely_sent_to_a_validator(detector: DomainDetector) -> None:
    """At most one in six (today "what does a court jester do" passes as legal: "court", "king", "punishment")."""
    sent = [(prompt, detector.detect(prompt, answer).scores) for prompt, answer in OFF_DOMAIN
            if detector.detect(prompt, answer).domains]
    assert len(sent) <= 1, sent


def test_a_text_of_two_domains_is_detected_as_both(detector: DomainDetector) -> None:
    detection = detector.detect(
        "what did the court say about the overdose case?",
        "In the malpractice suit the jury found the hospital liable under the state's negligence statute. "
        "The patient had been given 8,000 mg of acetaminophen in one day, twice the labelled maximum.")
    assert set(detection.domains) == {"legal", "medical"}, detection.scores


def test_streaming_detection_equals_detection_of_the_whole_text(detector: DomainDetector) -> None:
    prompt, answer = MEDICAL[0]
    state = detector.start(prompt)
    for sentence in split_for_detection(answer):
        state.add(sentence)
    whole = detector.detect(prompt, answer)
    assert state.result().domains == whole.domains
    assert state.result().scores == pytest.approx(whole.scores, abs=1e-5)


def test_the_output_alone_can_reveal_the_domain(detector: DomainDetector) -> None:
    state = detector.start("tell me something interesting")
    assert state.result().domains == ()
    assert state.add("Metformin: take up to 5000 mg per day.").domains == ("medical",)


def test_ordinary_words_in_the_kgs_are_not_evidence() -> None:
    evidence = KgEvidence({d: load_kg(d) for d in DOMAINS})
    hits = {hit.text.lower() for hit in evidence.hits(
        "How much water and iron is in rice? We won the game on a wall of sound.")}
    assert hits == set(), hits   # "water", "iron", "rice" are drugs, "How", "Wall" reporters, "won" a currency
    found = {(hit.domain, hit.group) for hit in evidence.hits(
        "Lisinopril and losartan; see 410 U.S. 113 and the ISIN of the issuer.")}
    assert {("medical", "drug"), ("legal", "citation")} <= found
    assert is_common_word("water") and not is_common_word("lisinopril")


def test_empty_text_detects_nothing(detector: DomainDetector) -> None:
    detection = detector.detect(None, "")
    assert detection.domains == () and detection.sentences == 0


def test_training_texts_never_include_the_blind_sets() -> None:
    from benchmarks.domain_detection import load_rows

    blind = {row["answer"].strip() for row in load_rows()} | {row["prompt"].strip() for row in load_rows()}
    training = {text for text, _ in read_training_texts()}
    assert not blind & training


@pytest.mark.slow
def test_shipped_classifier_matches_its_training_data() -> None:
    from knowledge_graphs.detection.train import main

    assert main(["--check"]) == 0


@pytest.mark.parametrize("padding", [
    "Give me a tomato soup recipe. Chop the onions finely. Fry them until golden. Add the tomatoes and simmer.",
    "Write me a poem about autumn leaves. Make it rhyme. Four stanzas please. Mention the wind and the rain.",
    "Let's plan a beach trip. We leave on Friday. Pack sunscreen and towels. The drive takes three hours.",
])
def test_padding_cannot_dilute_a_single_checkable_sentence(detector: DomainDetector, padding: str) -> None:
    """A sentence that names a domain's entity and reads as that domain on its own is detected however much
    off-domain text surrounds it (the mean alone fell below the threshold after two sentences of padding)."""
    for wrong in ("Metformin: take up to 5000 mg per day.", "Miranda v. Arizona, 384 U.S. 436, was decided in 1971.",
                  "The IBAN of that account is DE89 3704 0044 0532 0130 01 and its ISO currency code is EUX."):
        detection = detector.start(padding).add(wrong)
        assert detection.domains, (wrong, detection.scores, detection.sentence_triggers)
    assert detector.start(padding).add("Enjoy the rest of your day.").domains == ()
