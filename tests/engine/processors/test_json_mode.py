"""JSON mode through XGrammar: whatever the logits say, the decoded output is valid JSON for the schema."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import pytest
import torch
import xgrammar as xgr
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from engine.processors.json_mode import (
    JSON_OBJECT_SCHEMA,
    JsonModeProcessor,
    bound_string_lengths_by_pattern,
    detect_vocab_type,
    schema_for_response_format,
)
from engine.sampling_params import InvalidRequestError, SamplingParams

EOS = 0
MODEL_VOCAB = 416  # wider than the tokenizer: the model's embedding is padded


def _json_corpus(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = ["name", "age", "dose", "drug", "tags", "value", "alpha", "beta", "count", "city", "x"]

    def value(depth: int) -> Any:
        roll = rng.random()
        if depth < 2 and roll < 0.2:
            return {rng.choice(words): value(depth + 1) for _ in range(rng.randint(0, 3))}
        if depth < 2 and roll < 0.35:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        if roll < 0.55:
            return rng.randint(-1000, 100000)
        if roll < 0.65:
            return round(rng.random() * 100, 3)
        if roll < 0.75:
            return rng.choice([True, False, None])
        return " ".join(rng.choice(words) for _ in range(rng.randint(1, 3)))

    return [json.dumps(value(0), indent=rng.choice([None, 2])) for _ in range(count)]


def _byte_level_tokenizer(full_alphabet: bool = True) -> Tokenizer:
    """GPT-2 / Llama-3 style byte-level BPE; id 0 is <|endoftext|>."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet() if full_alphabet else [],
    )
    tokenizer.train_from_iterator(_json_corpus(400, seed=0), trainer)
    return tokenizer


@pytest.fixture(scope="module")
def byte_level_tokenizer() -> Tokenizer:
    return _byte_level_tokenizer()


@pytest.fixture(scope="module")
def byte_fallback_tokenizer() -> Tokenizer:
    """Llama-2 / sentencepiece style: "▁" spaces, a prepended space, <0xXX> byte pieces; </s> is id 2."""
    base = Tokenizer(models.BPE(unk_token="<unk>"))
    base.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    base.train_from_iterator(_json_corpus(300, seed=1), trainers.BpeTrainer(vocab_size=150, show_progress=False))
    trained = json.loads(base.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"<0x{byte:02X}>": 3 + byte for byte in range(256)}
    for token, _ in sorted(trained["vocab"].items(), key=lambda item: item[1]):
        vocab.setdefault(token, len(vocab))
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in trained["merges"]]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True))
    tokenizer.normalizer = base.normalizer
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tokenizer.add_special_tokens(["<unk>", "<s>", "</s>"])
    return tokenizer


@pytest.fixture(scope="module")
def processor(byte_level_tokenizer) -> JsonModeProcessor:
    return JsonModeProcessor(byte_level_tokenizer, vocab_size=MODEL_VOCAB, eos_token_ids=[EOS])


def _json_object() -> SamplingParams:
    return SamplingParams(response_format={"type": "json_object"})


def _json_schema(schema: dict[str, Any], max_tokens: int = 1000) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens,
                          response_format={"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}})


def _decode(
    processor: JsonModeProcessor, params: SamplingParams, *, seed: int, vocab: int = MODEL_VOCAB,
    eos: int = EOS, max_steps: int = 2000, request_id: str = "req",
) -> tuple[list[int], str]:
    """Drive the processor like the engine: a batch of 3 rows with adversarial random logits (EOS
    and padding ids pushed up), argmax sampling. Returns (tokens without EOS, how it ended)."""
    generator = torch.Generator().manual_seed(seed)
    assert processor.add_request(request_id, params, [1, 2, 3], [])
    tokens: list[int] = []
    try:
        for _ in range(max_steps):
            logits = torch.randn(3, vocab, generator=generator) * 3  # [rows, vocab]
            logits[:, eos] += 6.0          # the "model" wants to stop at once
            logits[:, vocab - 8:] += 6.0   # ... or to emit padding ids
            untouched = logits[[0, 2]].clone()
            processor.apply(logits, [None, request_id, "someone-else"])
            assert torch.equal(logits[[0, 2]], untouched), "rows of other requests must not change"
            if not torch.isfinite(logits[1]).any():
                return tokens, "dead_end"
            token = int(logits[1].argmax())
            processor.accept_token(request_id, token)
            if token == eos:
                return tokens, "eos"
            tokens.append(token)
            if processor.is_finished(request_id):
                return tokens, "finished"
        return tokens, "length"
    finally:
        processor.remove_request(request_id)


@pytest.mark.parametrize("seed", range(6))
def test_json_object_mode_always_yields_a_json_object(processor, byte_level_tokenizer, seed):
    tokens, ended = _decode(processor, _json_object(), seed=seed)
    assert ended == "finished"  # the grammar closed the object; EOS was never allowed before that
    assert all(t < byte_level_tokenizer.get_vocab_size() for t in tokens)  # no padding ids
    assert isinstance(json.loads(byte_level_tokenizer.decode(tokens)), dict)


PATIENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        # What the KG layer produces from "x-kg-entity-type": an enum of linked entity names (the
        # marker may stay; XGrammar must ignore it). Values span several tokens, spaces, non-ASCII.
        "drug": {"type": "string", "enum": ["aspirin", "ibuprofen", "acetylsalicylic acid", "paracétamol"],
                 "x-kg-entity-type": "drug"},
        "tags": {"type": "array", "items": {"enum": ["acute", "chronic"]}, "maxItems": 3},
        "dose_mg": {"type": ["number", "null"]},
    },
    "required": ["name", "age", "drug", "tags", "dose_mg"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("seed", range(6))
def test_json_schema_mode_output_matches_the_schema(processor, byte_level_tokenizer, seed):
    tokens, ended = _decode(processor, _json_schema(PATIENT_SCHEMA), seed=seed)
    assert ended == "finished"
    value = json.loads(byte_level_tokenizer.decode(tokens))  # strict: no raw control characters
    assert list(value) == ["name", "age", "drug", "tags", "dose_mg"]
    assert isinstance(value["name"], str) and 1 <= len(value["name"]) <= 12
    assert isinstance(value["age"], int) and 0 <= value["age"] <= 120
    assert value["drug"] in PATIENT_SCHEMA["properties"]["drug"]["enum"]
    assert len(value["tags"]) <= 3 and set(value["tags"]) <= {"acute", "chronic"}
    assert value["dose_mg"] is None or isinstance(value["dose_mg"], int | float)


def test_grammar_termination_is_reported_as_an_event(processor, byte_level_tokenizer):
    processor.add_request("ev", _json_object(), [1], [])
    for token in byte_level_tokenizer.encode("{}").ids:
        processor.accept_token("ev", token)
    events = processor.pop_events("ev")
    assert processor.is_finished("ev")
    assert [(e.processor, e.kind, e.position) for e in events] == [("json_mode", "grammar_terminated", 0)]
    assert processor.pop_events("ev") == []  # popped once
    processor.remove_request("ev")


def test_unconstrained_requests_are_not_touched(processor):
    for params in (SamplingParams(), SamplingParams(response_format={"type": "text"})):
        processor.validate_params(params)
        assert processor.add_request("free", params, [1], []) is False
    logits = torch.randn(2, MODEL_VOCAB)
    before = logits.clone()
    processor.apply(logits, ["free", None])
    assert torch.equal(logits, before)
    assert not processor.is_finished("free")


def test_preempted_request_replays_to_identical_masks(processor):
    params = _json_schema(PATIENT_SCHEMA)
    generator = torch.Generator().manual_seed(5)
    processor.add_request("live", params, [1], [])
    generated: list[int] = []
    masks: list[torch.Tensor] = []
    for _ in range(12):
        logits = torch.randn(1, MODEL_VOCAB, generator=generator)
        processor.apply(logits, ["live"])
        masks.append(torch.isneginf(logits[0]))
        token = int(logits[0].argmax())
        processor.accept_token("live", token)
        generated.append(token)
    processor.remove_request("live")  # preempted ...
    for cut in (1, 6, 11):            # ... and back with its tokens so far
        processor.add_request("live", params, [1], generated[:cut])
        logits = torch.zeros(1, MODEL_VOCAB)
        processor.apply(logits, ["live"])
        assert torch.equal(torch.isneginf(logits[0]), masks[cut])
        assert processor.pop_events("live") == []  # a replay does not repeat events
        processor.remove_request("live")


@pytest.mark.parametrize(
    ("response_format", "message"),
    [
        ({"type": "json_schema", "json_schema": {"schema": [1, 2]}}, "must be an object"),
        ({"type": "json_schema", "json_schema": {"schema": {"type": "nonsense"}}}, "not supported"),
        ({"type": "json_schema", "json_schema": {"schema": {"$ref": "#/$defs/missing"}}}, "not supported"),
        ({"type": "json_schema", "json_schema": {"schema": {"type": "integer", "minimum": "x"}}}, "not supported"),
        ({"type": "json_schema", "json_schema": {"schema": {}, "strict": "yes"}}, "strict"),
        ({"type": "json_schema", "json_schema": {"name": "no schema"}}, "schema is required"),
        ({"type": "json_schema", "json_schema": "{}"}, "json_schema must be an object"),
        ({"type": "yaml"}, "response_format.type"),
    ],
)
def test_unusable_json_schema_is_refused_with_a_clear_error(processor, response_format, message):
    with pytest.raises(InvalidRequestError, match=message) as caught:
        processor.validate_params(SamplingParams(response_format=response_format))
    assert "json_schema_converter.cc" not in str(caught.value)  # XGrammar's C++ location is stripped


def test_schema_for_response_format_shapes():
    assert schema_for_response_format(None) is None
    assert schema_for_response_format({"type": "text"}) is None
    assert schema_for_response_format({"type": "json_object"}) == JSON_OBJECT_SCHEMA
    schema = {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}}
    openai_shape = schema_for_response_format({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    bare_shape = schema_for_response_format({"type": "json_schema", "schema": schema})
    assert openai_shape == bare_shape
    assert list(json.loads(openai_shape)["properties"]) == ["b", "a"]  # property order is kept


def test_compiled_grammars_are_cached_by_schema_and_bounded(byte_level_tokenizer):
    processor = JsonModeProcessor(byte_level_tokenizer, vocab_size=MODEL_VOCAB, eos_token_ids=[EOS], cache_size=1)
    first = processor.compiled_grammar('{"type":"object"}')
    assert processor.compiled_grammar('{"type":"object"}') is first
    processor.compiled_grammar('{"type":"array"}')  # evicts the object grammar
    assert processor.compiled_grammar('{"type":"object"}') is not first


def test_length_bounded_strings_never_admit_raw_control_characters(processor):
    # XGrammar's own minLength/maxLength rule admits them (mlc-ai/xgrammar#800); ours must not.
    schema = json.dumps({"type": "string", "maxLength": 5})
    matcher = xgr.GrammarMatcher(processor.compiled_grammar(schema))
    assert not matcher.accept_string('"a\x0b')
    matcher = xgr.GrammarMatcher(processor.compiled_grammar(schema))
    assert matcher.accept_string('"abcde"') and matcher.is_completed()
    assert not xgr.GrammarMatcher(processor.compiled_grammar(schema)).accept_string('"abcdef')


def test_length_bound_rewrite_only_touches_string_schemas():
    schema = {
        "type": "object",
        "properties": {
            "minLength": {"type": "string", "minLength": 2},               # a property *named* minLength
            "code": {"type": "string", "maxLength": 4, "pattern": "^[A-Z]+$"},
            "notes": {"type": "array", "items": {"type": "string", "maxLength": 3}},
        },
        "enum": [{"maxLength": 1}],                                         # data, not a schema
    }
    patched = bound_string_lengths_by_pattern(schema)
    assert patched["properties"]["minLength"] == {"type": "string", "pattern": "^.{2,}$"}
    assert patched["properties"]["code"] == schema["properties"]["code"]
    assert patched["properties"]["notes"]["items"] == {"type": "string", "pattern": "^.{0,3}$"}
    assert patched["enum"] == [{"maxLength": 1}]
    assert schema["properties"]["minLength"] == {"type": "string", "minLength": 2}  # input not mutated


def test_sampling_outside_the_mask_kills_the_row_instead_of_dropping_the_constraint(processor, byte_level_tokenizer):
    processor.add_request("bad", _json_object(), [1], [])
    letter_x = byte_level_tokenizer.token_to_id("x")
    processor.accept_token("bad", letter_x)  # an object cannot start with "x"
    logits = torch.randn(1, MODEL_VOCAB)
    processor.apply(logits, ["bad"])
    assert torch.isneginf(logits).all()
    assert not processor.is_finished("bad")
    kinds = [(e.kind, e.position) for e in processor.pop_events("bad")]
    assert kinds == [("token_rejected", 0), ("dead_end", 1)]
    processor.remove_request("bad")


def test_a_grammar_the_vocabulary_cannot_spell_is_a_dead_end():
    ascii_only = _byte_level_tokenizer(full_alphabet=False)  # no token holds the bytes of "é"
    processor = JsonModeProcessor(ascii_only, vocab_size=ascii_only.get_vocab_size(), eos_token_ids=[EOS])
    params = _json_schema({"type": "object", "properties": {"drug": {"const": "é"}}, "required": ["drug"]})
    tokens, ended = _decode(processor, params, seed=0, vocab=ascii_only.get_vocab_size(), max_steps=200)
    assert ended == "dead_end"
    assert "".join(ascii_only.decode(tokens).split()).endswith('"drug":"')  # stuck before "é"


def test_eos_ids_are_the_only_way_out_once_the_value_is_complete(processor, byte_level_tokenizer):
    processor.add_request("done", _json_object(), [1], [])
    for token in byte_level_tokenizer.encode('{"a":1}').ids:
        processor.accept_token("done", token)
    logits = torch.zeros(1, MODEL_VOCAB)
    processor.apply(logits, ["done"])
    assert torch.isfinite(logits[0]).nonzero().flatten().tolist() == [EOS]
    processor.remove_request("done")


def test_byte_level_and_sentencepiece_vocabularies_are_told_apart(byte_level_tokenizer, byte_fallback_tokenizer):
    assert detect_vocab_type(byte_level_tokenizer) == (xgr.VocabType.BYTE_LEVEL, False)
    assert detect_vocab_type(byte_fallback_tokenizer) == (xgr.VocabType.BYTE_FALLBACK, True)
    for tokenizer in (byte_level_tokenizer, byte_fallback_tokenizer):  # agrees with XGrammar's own reading
        theirs = xgr.TokenizerInfo._detect_metadata_from_hf(tokenizer.to_str())
        assert detect_vocab_type(tokenizer) == (theirs["vocab_type"], theirs["add_prefix_space"])


@pytest.mark.parametrize("seed", range(3))
def test_sentencepiece_style_tokenizer_yields_valid_json(byte_fallback_tokenizer, seed):
    vocab = byte_fallback_tokenizer.get_vocab_size()
    processor = JsonModeProcessor(byte_fallback_tokenizer, vocab_size=vocab, eos_token_ids=[2])
    tokens, ended = _decode(processor, _json_schema(PATIENT_SCHEMA), seed=seed, vocab=vocab, eos=2)
    assert ended == "finished"
    assert not {0, 1} & set(tokens)  # <unk> and <s> are special: never inside the JSON
    value = json.loads(byte_fallback_tokenizer.decode(tokens))
    assert value["drug"] in PATIENT_SCHEMA["properties"]["drug"]["enum"]


def test_batch_of_mixed_requests_masks_each_row_by_its_own_grammar(processor, byte_level_tokenizer):
    requests: Sequence[tuple[str, SamplingParams]] = [
        ("obj", _json_object()), ("free", SamplingParams()), ("enum", _json_schema({"enum": ["aspirin"]})),
    ]
    for request_id, params in requests:
        processor.add_request(request_id, params, [1], [])
    logits = torch.zeros(3, MODEL_VOCAB)
    processor.apply(logits, [r for r, _ in requests])
    assert torch.isfinite(logits[1]).all()  # the unconstrained row
    whitespace = set("ĠĊĉč")  # byte-level spellings of " ", "\n", "\t", "\r"

    def allowed(row: int) -> set[str]:
        return {byte_level_tokenizer.id_to_token(t) for t in torch.isfinite(logits[row]).nonzero().flatten().tolist()}

    # An object starts with "{" (after optional whitespace), the enum value with its opening quote.
    assert "{" in allowed(0) and all(set(t) <= whitespace or t.lstrip("ĠĊĉč").startswith("{") for t in allowed(0))
    assert '"' in allowed(2) and all(set(t) <= whitespace or t.lstrip("ĠĊĉč").startswith('"') for t in allowed(2))
    for request_id, _ in requests:
        processor.remove_request(request_id)


# ---------------------------------------------------------------- end to end through the engine

RX_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "drug": {"enum": ["aspirin", "ibuprofen", "amoxicillin"]},
        "dose_mg": {"type": "integer", "minimum": 0, "maximum": 1000},
        "daily": {"type": "boolean"},
    },
    "required": ["drug", "dose_mg", "daily"],
}
PROMPTS = ["Give me the prescription as JSON:", "The patient was prescribed", "hello", "Revenue grew"]


@pytest.fixture(scope="module")
def json_engine(tiny_llama):
    from engine.config import EngineConfig
    from engine.llm_engine import LLMEngine

    # Few whitespace characters per gap: a random model loves whitespace tokens, and the tiny
    # checkpoint's context is short.
    processor = JsonModeProcessor.for_checkpoint(tiny_llama, max_whitespace=4)
    engine = LLMEngine.from_pretrained(tiny_llama, EngineConfig(max_num_seqs=8), logits_processors=[processor])
    return engine, processor


def test_engine_json_schema_requests_end_with_stop_and_parse(json_engine):
    engine, _ = json_engine
    params = SamplingParams(
        temperature=0, max_tokens=200,
        response_format={"type": "json_schema", "json_schema": {"name": "rx", "schema": RX_SCHEMA}},
    )
    for output in engine.generate(PROMPTS, params):
        assert output.finish_reason == "stop"
        value = json.loads(output.text)
        assert value["drug"] in RX_SCHEMA["properties"]["drug"]["enum"]
        assert 0 <= value["dose_mg"] <= 1000 and isinstance(value["daily"], bool)
        assert [e.kind for e in output.events] == ["grammar_terminated"]
        assert output.events[0].position == len(output.token_ids) - 1  # the closing token


def test_engine_json_object_requests_never_leave_the_grammar(json_engine):
    # A random model may write one endless string (finish "length"); whatever it writes must be
    # valid JSON when it stops, and a prefix of a JSON object at every step.
    engine, processor = json_engine
    params = SamplingParams(temperature=0, max_tokens=64, response_format={"type": "json_object"})
    grammar = processor.compiled_grammar(JSON_OBJECT_SCHEMA)
    for output in engine.generate(PROMPTS, params):
        assert output.finish_reason in ("stop", "length")
        if output.finish_reason == "stop":
            assert isinstance(json.loads(output.text), dict)
        matcher = xgr.GrammarMatcher(grammar)
        assert all(matcher.accept_token(t) for t in output.token_ids)


def test_engine_refuses_an_invalid_schema_before_any_compute(json_engine):
    engine, _ = json_engine
    bad = SamplingParams(response_format={"type": "json_schema", "json_schema": {"schema": {"type": "nonsense"}}})
    with pytest.raises(InvalidRequestError, match="JSON schema"):
        engine.add_request("bad-schema", "hello", bad)
    assert not engine.has_unfinished()


def test_xgrammar_loads_on_first_use_or_warm_up_and_the_first_request_is_served_the_same(byte_level_tokenizer) -> None:
    """An engine core builds the processor before it is ready and imports XGrammar after (warm_up on a thread):
    a JSON request that comes first builds the same compiler itself, and both get the same grammar."""
    cold = JsonModeProcessor(byte_level_tokenizer, vocab_size=MODEL_VOCAB, eos_token_ids=[EOS])
    assert cold._compiler_and_matcher is None   # nothing of XGrammar's built yet
    cold.validate_params(_json_object())        # a first request: builds it on demand
    warmed = JsonModeProcessor(byte_level_tokenizer, vocab_size=MODEL_VOCAB, eos_token_ids=[EOS])
    warmed.warm_up()
    assert cold._compiler_and_matcher is not None and warmed._compiler_and_matcher is not None
    schema = '{"type":"object"}'
    assert str(cold.compiled_grammar(schema).grammar) == str(warmed.compiled_grammar(schema).grammar)


def test_a_processor_is_built_without_importing_xgrammar(tmp_path) -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from engine.synthetic import write_tiny_checkpoint\n"
        "from engine.processors.json_mode import JsonModeProcessor\n"
        f"processor = JsonModeProcessor.for_checkpoint(write_tiny_checkpoint({str(tmp_path)!r}))\n"
        "assert 'xgrammar' not in sys.modules, 'imported before first use'\n"
        "processor.warm_up()\n"
        "assert 'xgrammar' in sys.modules\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
