"""Cost accounting's pieces: the price table, template tokens on a real chat template, the exclusions, and one
request's usage."""

from __future__ import annotations

from pathlib import Path

import pytest

from auditor.serving.cost import (
    DeliveredRequests,
    PriceTable,
    PriceTableError,
    TemplateTokens,
    excluded_reason,
    usage_for,
)
from auditor.settings import Settings
from engine.llm_engine import load_tokenizer


def _table(tmp_path: Path, text: str) -> PriceTable:
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    return PriceTable.load(path)


def test_price_table_per_model_with_a_default(tmp_path: Path) -> None:
    table = _table(tmp_path, "currency: EUR\nmodels:\n  big: {prompt_per_1k: 0.5, completion_per_1k: 1.5}\n"
                             "  '*': {engine_second: 0.002}\n")
    assert table.currency == "EUR"
    assert table.price_for("big").cost(prompt_tokens=2000, completion_tokens=1000, engine_seconds=9) == 2.5
    assert table.price_for("small").cost(prompt_tokens=2000, completion_tokens=1000, engine_seconds=3) == 0.006
    assert table.price_for(None) is table.price_for("anything")
    assert len(table.version) == 16 and _table(tmp_path, "models: {}\n").version != table.version


def test_a_model_may_have_both_kinds_of_price(tmp_path: Path) -> None:
    table = _table(tmp_path, "models:\n  m: {prompt_per_1k: 1, completion_per_1k: 2, engine_second: 10}\n")
    assert table.price_for("m").cost(prompt_tokens=500, completion_tokens=250, engine_seconds=0.1) == pytest.approx(2.0)


def test_without_a_table_nothing_is_priced() -> None:
    table = PriceTable.load(None)
    assert table.price_for("any") is None
    usage = usage_for(prices=table, model_id="any", prompt_tokens=10, completion_tokens=5, template_tokens=4,
                      engine_seconds=0.5, excluded=None)
    assert (usage.cost, usage.currency, usage.price_table) == (None, None, None)
    assert (usage.effective_prompt_tokens, usage.effective_completion_tokens) == (6, 5)


@pytest.mark.parametrize("text, fragment", [
    ("models:\n  m: {prompt_per_1k: -1}\n", "greater than or equal to 0"),
    ("models:\n  m: {}\n", "a price needs"),
    ("models:\n  m: {prompt_per_1k: 1, per_request: 3}\n", "per_request"),
    ("models:\n  m: {prompt_per_1k: lots}\n", "valid number"),
    ("models: [1, 2\n", "cannot read"),
    ("unknown_key: 1\n", "unknown_key"),
])
def test_bad_price_tables_are_refused_with_where(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(PriceTableError, match=fragment):
        _table(tmp_path, text)


def test_a_missing_table_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PriceTableError, match="cannot read the price table"):
        PriceTable.load(tmp_path / "absent.yaml")


def test_template_tokens_on_the_bundled_chat_template() -> None:
    """The scaffold of a real template: what the prompt costs beyond the message texts themselves."""
    path = Settings().resolved_model_path()
    tokenizer = load_tokenizer(path)
    counter = TemplateTokens(tokenizer)
    messages = [{"role": "system", "content": "You answer medical questions briefly."},
                {"role": "user", "content": "What is the maximum daily dose of metformin for adults?"}]
    rendered = tokenizer.encode(tokenizer.apply_chat_template(messages, add_generation_prompt=True))
    template = counter.for_messages(messages)
    assert 0 < template < len(rendered)
    # the messages' own tokens account for (about) the rest: boundaries may merge a token or two
    own = sum(len(tokenizer.encode(m["content"], add_special_tokens=False)) for m in messages)
    assert abs(len(rendered) - template - own) <= 2
    # the same shape with other texts has the same scaffold; another shape has another
    other = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Dose of warfarin?"}]
    assert counter.for_messages(other) == template
    assert counter.for_messages(messages[1:]) < template
    assert counter.for_prompt() == len(tokenizer.encode(""))


def test_template_tokens_never_fail_a_request() -> None:
    class Refusing:
        def encode(self, text: str) -> list[int]:
            return [1]

        def apply_chat_template(self, messages, add_generation_prompt=True) -> str:
            raise ValueError("conversation roles must alternate")

    assert TemplateTokens(Refusing()).for_messages([{"role": "user", "content": "x"}]) == 0


@pytest.mark.parametrize("status, delivered, calls, retry, reason", [
    ("completed", "Metformin: up to 2550 mg a day.", False, False, None),
    ("blocked", "The first sentence passed.", False, False, None),   # partly withheld: what passed counts
    ("error", "Half an answer", False, False, "failed"),
    ("error", "", False, True, "failed"),
    ("refused", "I can't help with this request: prompt injection.", False, False, "empty"),
    ("completed", "  \n", False, False, "empty"),
    ("blocked", "", False, False, "empty"),
    ("completed", "", True, False, None),                             # tool calls are an answer
    ("completed", "Same answer again.", False, True, "retry"),
])
def test_exclusion_reasons(status: str, delivered: str, calls: bool, retry: bool, reason: str | None) -> None:
    assert excluded_reason(status=status, delivered=delivered, tool_calls=calls, retry=retry) == reason


def test_excluded_requests_are_billed_but_not_effective(tmp_path: Path) -> None:
    table = _table(tmp_path, "models:\n  m: {prompt_per_1k: 1, completion_per_1k: 2}\n")
    usage = usage_for(prices=table, model_id="m", prompt_tokens=100, completion_tokens=50, template_tokens=12,
                      engine_seconds=0.25, excluded="empty")
    assert usage.cost == pytest.approx(0.2)
    assert (usage.effective_prompt_tokens, usage.effective_completion_tokens) == (0, 0)
    record = usage.to_record()
    assert record["excluded"] == "empty" and record["template_tokens"] == 12 and record["price_table"] == table.version


def test_later_choices_do_not_pay_for_the_prompt_again(tmp_path: Path) -> None:
    table = _table(tmp_path, "models:\n  m: {prompt_per_1k: 1, completion_per_1k: 1}\n")
    first = usage_for(prices=table, model_id="m", prompt_tokens=1000, completion_tokens=10, template_tokens=10,
                      engine_seconds=0, excluded=None)
    second = usage_for(prices=table, model_id="m", prompt_tokens=1000, completion_tokens=10, template_tokens=10,
                       engine_seconds=0, excluded=None, prompt_billed=False)
    assert (first.prompt_tokens, first.effective_prompt_tokens) == (1000, 990)
    assert (second.prompt_tokens, second.effective_prompt_tokens, second.template_tokens) == (0, 0, 0)
    assert second.cost == pytest.approx(0.01)


def test_delivered_requests_forget_the_least_recent() -> None:
    delivered = DeliveredRequests(window=2)
    for key in (("t", "a", 0), ("t", "b", 0)):
        delivered.remember(key)
    assert delivered.seen_before(("t", "a", 0))      # touched: now the most recent
    delivered.remember(("t", "c", 0))
    assert not delivered.seen_before(("t", "b", 0))
    assert delivered.seen_before(("t", "a", 0)) and delivered.seen_before(("t", "c", 0))
    assert not delivered.seen_before(("other-tenant", "a", 0)) and not delivered.seen_before(("t", "a", 1))
