"""JSON mode: constrain decoding to a JSON object, a JSON schema or a structural tag with XGrammar.

`response_format` (OpenAI's shape) selects the constraint: {"type": "json_object"} -> any JSON
object; {"type": "json_schema", "json_schema": {"schema": {...}}} -> that schema; {"type":
"structural_tag", "format": {...}} -> XGrammar's structural tag (tool calls: free text, then calls whose
arguments follow each function's schema); "text" or None -> unconstrained. One `GrammarCompiler` per
engine compiles each distinct grammar once (an LRU keyed by its canonical JSON); each constrained
request gets its own `GrammarMatcher`, which fills one row of a preallocated packed bitmask per step
(XGrammar's layout, the same as `engine.kernels.bitmask`).

Compact by default: at most one whitespace character between two JSON tokens (in JSON mode and in
structural-tag arguments), so a model cannot spend its budget on runs of blanks. Within budget: when the tokens left to a request
(`max_tokens`) are barely enough to close the value, the processor forces the shortest closing
(`json_closing`) and records a "closed_for_budget" event, so a cut object still parses.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tokenizers import Tokenizer

from engine.kernels.bitmask import apply_token_bitmask_additive, bitmask_from_token_ids, bitmask_words
from engine.lazy_import import LazyModule
from engine.outputs import ProcessorEvent
from engine.processors.json_closing import shortest_closing
from engine.processors.logits_process import LogitsProcessor
from engine.sampling_params import InvalidRequestError, SamplingParams

if TYPE_CHECKING:
    import xgrammar as xgr
else:   # imported on first use: most requests never ask for JSON (see `JsonModeProcessor.warm_up`)
    xgr = LazyModule("xgrammar")

JSON_OBJECT_SCHEMA = '{"type":"object"}'
# Whitespace characters allowed between two JSON tokens: enough for pretty-printed nesting, but a
# model cannot loop on whitespace forever (a known failure of unbounded any-whitespace grammars).
DEFAULT_MAX_WHITESPACE = 32
# Compact (the default): at most one whitespace character between two JSON tokens, in JSON mode and in tool
# arguments alike. `{"a":1}` and `{"a": 1}` both pass, a run of blanks does not.
COMPACT_MAX_WHITESPACE = 1
DEFAULT_GRAMMAR_CACHE_SIZE = 256
# Closing is checked once this few tokens are left; it is forced once it needs all but CLOSE_MARGIN of them
# (one free token can open a string or an object and lengthen the closing by a few tokens).
CLOSE_WINDOW = 48
CLOSE_MARGIN = 6
_STRUCTURAL_TAG_KEY = "structural_tag:"
# XGrammar prefixes C++ errors with "[hh:mm:ss] /path/file.cc:line: "; users need only the message.
_XGRAMMAR_ERROR_PREFIX = re.compile(r"^\[[\d:]+\]\s+\S+:\d+:\s*")


def schema_for_response_format(response_format: Mapping[str, Any] | None) -> str | None:
    """The canonical JSON-schema text `response_format` asks for; None when output is unconstrained.

    Raises InvalidRequestError for a malformed response_format. Property order is kept (it is the
    order in which the constrained output writes the properties)."""
    if response_format is None:
        return None
    if not isinstance(response_format, Mapping):
        raise InvalidRequestError("response_format must be an object")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return JSON_OBJECT_SCHEMA
    if kind == "structural_tag":
        return _STRUCTURAL_TAG_KEY + _canonical(response_format.get("format"), "response_format.format")
    if kind != "json_schema":
        raise InvalidRequestError(
            f"response_format.type must be text, json_object, json_schema or structural_tag, got {kind!r}")
    # OpenAI: {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}; also a bare "schema".
    spec = response_format.get("json_schema", response_format)
    if not isinstance(spec, Mapping):
        raise InvalidRequestError("response_format.json_schema must be an object holding a 'schema'")
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise InvalidRequestError(f"response_format.json_schema.strict must be true or false, got {strict!r}")
    if "schema" not in spec:
        raise InvalidRequestError("response_format.json_schema.schema is required for type json_schema")
    schema = spec["schema"]
    if not isinstance(schema, Mapping):
        raise InvalidRequestError(f"response_format JSON schema must be an object, got {type(schema).__name__}")
    return _canonical(schema, "response_format JSON schema")


def _canonical(value: Any, what: str) -> str:
    if not isinstance(value, Mapping):
        raise InvalidRequestError(f"{what} must be an object, got {type(value).__name__}")
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidRequestError(f"{what} is not valid JSON: {exc}") from exc


# Keywords whose value is one subschema / a list of subschemas / a name -> subschema mapping.
_SUBSCHEMA = ("additionalProperties", "items", "not", "if", "then", "else", "contains", "propertyNames",
              "unevaluatedProperties", "unevaluatedItems", "additionalItems")
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def bound_string_lengths_by_pattern(schema: Any) -> Any:
    """A copy of `schema` in which minLength/maxLength on strings become an equivalent `pattern`.

    Works around XGrammar 0.2.x (mlc-ai/xgrammar#800, open): its minLength/maxLength string rule
    admits raw control characters (U+0000-U+001F), which is invalid JSON, while its `pattern` rule is
    JSON-aware. `^.{m,n}$` keeps the length bounds; it only narrows the accepted strings (no line
    breaks), so every output still validates against the caller's schema. Schemas that already
    carry a pattern or a format are left alone."""
    if isinstance(schema, list):
        return [bound_string_lengths_by_pattern(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    patched = dict(schema)
    for key in _SUBSCHEMA + _SUBSCHEMA_LISTS:
        if key in patched:
            patched[key] = bound_string_lengths_by_pattern(patched[key])
    for key in _SUBSCHEMA_MAPS:
        if isinstance(patched.get(key), dict):
            patched[key] = {name: bound_string_lengths_by_pattern(sub) for name, sub in patched[key].items()}
    low, high = patched.get("minLength", 0), patched.get("maxLength")
    bounds_are_counts = all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (low, high or 0))
    if ("minLength" in patched or "maxLength" in patched) and bounds_are_counts \
            and "pattern" not in patched and "format" not in patched:
        patched.pop("minLength", None)
        patched.pop("maxLength", None)
        patched["pattern"] = f"^.{{{low},{'' if high is None else high}}}$"
    return patched


def detect_vocab_type(tokenizer: Tokenizer) -> tuple[xgr.VocabType, bool]:
    """(how vocabulary strings encode bytes, whether the tokenizer prepends a space) for XGrammar.

    Read from tokenizer.json the way XGrammar's own Hugging Face detection does: a ByteLevel decoder
    means GPT-2 style byte-to-unicode tokens; a ByteFallback or Metaspace decoder means
    sentencepiece-style "▁" spaces and "<0xXX>" byte pieces; a "▁" Prepend normalizer or a Metaspace
    pre-tokenizer that prepends means a leading space is added to the text. The vocabulary itself
    overrides the decoder when it plainly holds the 256 byte pieces."""
    spec = json.loads(tokenizer.to_str())
    decoders = {part.get("type") for part in _flatten(spec.get("decoder"), "decoders")}
    if "ByteLevel" in decoders:
        vocab_type = xgr.VocabType.BYTE_LEVEL
    elif decoders & {"ByteFallback", "Metaspace"}:
        vocab_type = xgr.VocabType.BYTE_FALLBACK
    else:
        vocab_type = xgr.VocabType.RAW
    vocab = tokenizer.get_vocab(with_added_tokens=False)
    if sum(f"<0x{byte:02X}>" in vocab for byte in range(256)) >= 128:
        vocab_type = xgr.VocabType.BYTE_FALLBACK
    prepends = any(
        part.get("type") == "Prepend" and part.get("prepend") == "▁"
        for part in _flatten(spec.get("normalizer"), "normalizers")
    ) or any(
        part.get("type") == "Metaspace"
        and (part.get("prepend_scheme") in ("always", "first") or part.get("add_prefix_space") is True)
        for part in _flatten(spec.get("pre_tokenizer"), "pretokenizers")
    )
    return vocab_type, prepends


def _flatten(component: Any, children_key: str) -> list[dict[str, Any]]:
    """A tokenizer.json component (normalizer, pre_tokenizer, decoder), Sequence types unrolled."""
    if not isinstance(component, dict):
        return []
    if component.get("type") == "Sequence":
        return [part for child in component.get(children_key, []) for part in _flatten(child, children_key)]
    return [component]


def build_tokenizer_info(tokenizer: Tokenizer, *, vocab_size: int, eos_token_ids: Sequence[int]) -> xgr.TokenizerInfo:
    """XGrammar's view of the vocabulary: `vocab_size` (the model's logits width) entries.

    Special added tokens other than EOS get an empty string, which XGrammar never allows (otherwise
    a chat marker such as "<|im_start|>" could be spelled inside a JSON string); ids past the
    tokenizer's vocabulary (padding of the model's embedding) are never allowed either."""
    vocab_type, prepends_space = detect_vocab_type(tokenizer)
    eos = set(eos_token_ids)
    special = {tok_id for tok_id, added in tokenizer.get_added_tokens_decoder().items() if added.special} - eos
    encoded_vocab = [""] * vocab_size
    for token, tok_id in tokenizer.get_vocab(with_added_tokens=True).items():
        if tok_id < vocab_size and tok_id not in special:
            encoded_vocab[tok_id] = token
    return xgr.TokenizerInfo(
        encoded_vocab, vocab_type, vocab_size=vocab_size,
        stop_token_ids=sorted(eos), add_prefix_space=prepends_space,
    )


@dataclass(slots=True)
class _RequestState:
    matcher: xgr.GrammarMatcher
    budget: int                  # max_tokens: output tokens this request may write in all
    num_tokens: int = 0          # output tokens seen = position of the next token
    rejected: bool = False       # a sampled token broke the grammar: the row stays dead
    complete: bool = False       # the JSON value is closed; only a stop token may follow
    dead_end_recorded: bool = False
    forced: list[int] = field(default_factory=list)   # closing tokens still to write (budget running out)
    closing_failed: bool = False  # a closing was not found once (recorded once; tried again each step)
    events: list[ProcessorEvent] = field(default_factory=list)

    @property
    def tokens_left(self) -> int:
        return self.budget - self.num_tokens


class JsonModeProcessor(LogitsProcessor):
    """Masks constrained rows to the tokens that keep the output a prefix of valid JSON."""

    name = "json_mode"

    def __init__(
        self, tokenizer: Tokenizer, *, vocab_size: int, eos_token_ids: Sequence[int],
        compact: bool = True, max_whitespace: int | None = DEFAULT_MAX_WHITESPACE,
        close_within_budget: bool = True, cache_size: int = DEFAULT_GRAMMAR_CACHE_SIZE,
    ) -> None:
        """`compact`: at most one whitespace character between JSON tokens (else up to `max_whitespace`); `close_within_budget`: force the shortest closing when max_tokens runs out."""
        if vocab_size < tokenizer.get_vocab_size(with_added_tokens=False):
            raise ValueError(f"vocab_size {vocab_size} is smaller than the tokenizer's base vocabulary")
        self.vocab_size = vocab_size
        self.eos_token_ids = list(eos_token_ids)
        self.compact = compact
        self.max_whitespace = max_whitespace
        self.close_within_budget = close_within_budget
        self.cache_size = cache_size
        self._tokenizer = tokenizer
        # XGrammar's compiler and batch matcher: built on first use (`_xgrammar`), or by `warm_up`
        self._compiler_and_matcher: tuple[xgr.GrammarCompiler, xgr.BatchGrammarMatcher] | None = None
        self._xgrammar_lock = threading.Lock()
        self._grammars: OrderedDict[str, xgr.CompiledGrammar] = OrderedDict()
        self._states: dict[str, _RequestState] = {}
        self._grammars_lock = threading.Lock()
        self._bitmask = torch.empty((8, bitmask_words(vocab_size)), dtype=torch.int32)  # [capacity, words]
        # What the mask looks like when the grammar leaves nothing but ending the sequence.
        self._stop_only = bitmask_from_token_ids(self.eos_token_ids, vocab_size)      # [words]
        self._scratch = torch.empty((1, bitmask_words(vocab_size)), dtype=torch.int32)  # [1, words]

    def _xgrammar(self) -> tuple[xgr.GrammarCompiler, xgr.BatchGrammarMatcher]:
        """XGrammar's compiler over this vocabulary and the batch matcher, built once, on first use."""
        built = self._compiler_and_matcher
        if built is None:
            with self._xgrammar_lock:
                built = self._compiler_and_matcher
                if built is None:
                    info = build_tokenizer_info(self._tokenizer, vocab_size=self.vocab_size,
                                                eos_token_ids=self.eos_token_ids)
                    built = self._compiler_and_matcher = (
                        xgr.GrammarCompiler(info, cache_enabled=False),   # our LRU is the one cache, with a bound
                        xgr.BatchGrammarMatcher())
        return built

    @property
    def _compiler(self) -> xgr.GrammarCompiler:
        return self._xgrammar()[0]

    @property
    def _batch_matcher(self) -> xgr.BatchGrammarMatcher:
        return self._xgrammar()[1]

    def warm_up(self) -> None:
        """Import XGrammar, build its view of the vocabulary and compile the JSON-object grammar now (an engine
        core does this on a thread once it is ready), so that the first JSON request does not pay for it; one
        that comes sooner waits for the same work and is served as it would be later."""
        self.compiled_grammar(JSON_OBJECT_SCHEMA)

    @classmethod
    def for_checkpoint(cls, path: str | Path, **kwargs: Any) -> JsonModeProcessor:
        """The processor for a Hugging Face checkpoint folder, with the vocabulary width and EOS ids
        that `LLMEngine.from_pretrained` derives for the same folder."""
        from engine.checkpoint import load_tokenizer
        from engine.config import load_model_config

        model_config = load_model_config(Path(path))
        tokenizer = load_tokenizer(path, model_config)
        return cls(tokenizer.backend, vocab_size=model_config.vocab_size, eos_token_ids=tokenizer.eos_token_ids, **kwargs)

    # ---- grammars ------------------------------------------------------------------------------

    def compiled_grammar(self, schema: str) -> xgr.CompiledGrammar:
        """Compile (or fetch) the grammar of a canonical schema text; InvalidRequestError if unusable."""
        with self._grammars_lock:   # the engine core prepares requests on another thread than it steps
            grammar = self._grammars.get(schema)
            if grammar is not None:
                self._grammars.move_to_end(schema)
                return grammar
        try:
            grammar = self._compile(schema)
        except (RuntimeError, ValueError) as exc:  # XGrammar's C++ errors arrive as RuntimeError
            detail = _XGRAMMAR_ERROR_PREFIX.sub("", str(exc).strip()).splitlines()[0]
            what = "structural tag" if schema.startswith(_STRUCTURAL_TAG_KEY) else "JSON schema"
            raise InvalidRequestError(f"response_format {what} is not supported: {detail}") from exc
        with self._grammars_lock:
            self._grammars[schema] = grammar
            if len(self._grammars) > self.cache_size:
                self._grammars.popitem(last=False)
        return grammar

    def _compile(self, key: str) -> xgr.CompiledGrammar:
        if key.startswith(_STRUCTURAL_TAG_KEY):
            tag = json.loads(key.removeprefix(_STRUCTURAL_TAG_KEY))
            return self._compiler.compile_structural_tag(json.dumps({"type": "structural_tag", "format": tag}))
        try:
            patched = json.dumps(bound_string_lengths_by_pattern(json.loads(key)), ensure_ascii=False)
        except json.JSONDecodeError as exc:
            raise InvalidRequestError(f"response_format JSON schema is not valid JSON: {exc}") from exc
        limit = COMPACT_MAX_WHITESPACE if self.compact else self.max_whitespace
        return self._compiler.compile_json_schema(patched, any_whitespace=True, max_whitespace_cnt=limit,
                                                  strict_mode=True)

    # ---- the LogitsProcessor protocol ----------------------------------------------------------

    def validate_params(self, params: SamplingParams) -> None:
        schema = schema_for_response_format(params.response_format)
        if schema is not None:
            self.compiled_grammar(schema)

    def add_request(
        self, request_id: str, params: SamplingParams, prompt_token_ids: Sequence[int],
        output_token_ids: Sequence[int],
    ) -> bool:
        schema = schema_for_response_format(params.response_format)
        if schema is None:
            return False
        matcher = xgr.GrammarMatcher(
            self.compiled_grammar(schema),
            # Without any EOS id the grammar must end by itself once the JSON value is complete.
            terminate_without_stop_token=not self.eos_token_ids,
        )
        state = _RequestState(matcher, budget=params.max_tokens)
        for token_id in output_token_ids:  # a preempted request comes back: replay, silently
            self._advance(state, token_id)
        state.events.clear()
        self._states[request_id] = state
        return True

    def remove_request(self, request_id: str) -> None:
        self._states.pop(request_id, None)

    def apply(self, logits: torch.Tensor, request_ids: Sequence[str | None]) -> None:
        if not self._states:  # no constrained request in flight: free
            return
        if logits.shape[-1] != self.vocab_size:
            raise ValueError(f"logits have {logits.shape[-1]} columns, this processor was built for {self.vocab_size}")
        rows: list[int] = []
        states: list[_RequestState] = []
        for row, request_id in enumerate(request_ids):
            state = self._states.get(request_id) if request_id is not None else None
            if state is not None:
                rows.append(row)
                states.append(state)
        if not rows:
            return
        bitmask = self._bitmask_rows(len(rows))  # [k, words] int32, CPU
        live = [i for i, s in enumerate(states) if not (s.rejected or s.matcher.is_terminated())]
        if len(live) < len(states):
            bitmask.zero_()  # dead rows: nothing allowed, the engine ends them as dead ends
        if live:
            self._batch_matcher.batch_fill_next_token_bitmask([states[i].matcher for i in live], bitmask, live)
            if self.close_within_budget:
                self._force_closings(bitmask, states, live)
        self._record_dead_ends(bitmask, states)
        self._apply_bitmask(logits, bitmask, rows)

    def accept_token(self, request_id: str, token_id: int) -> None:
        state = self._states.get(request_id)
        if state is not None:
            self._advance(state, token_id)

    def is_finished(self, request_id: str) -> bool:
        state = self._states.get(request_id)
        return state is not None and (state.complete or state.matcher.is_terminated())

    def pop_events(self, request_id: str) -> list[ProcessorEvent]:
        state = self._states.get(request_id)
        if state is None or not state.events:
            return []
        events, state.events = state.events, []
        return events

    # ---- internals -----------------------------------------------------------------------------

    def _advance(self, state: _RequestState, token_id: int) -> None:
        position = state.num_tokens
        state.num_tokens += 1
        if state.forced and state.forced[0] == token_id:
            state.forced.pop(0)
        if state.rejected:
            return
        if not state.matcher.accept_token(token_id):
            # Only possible if something sampled outside the mask: keep the constraint, kill the row.
            state.rejected = True
            state.events.append(ProcessorEvent(self.name, position, "token_rejected", {"token_id": token_id}))
            return
        if state.matcher.is_terminated() or state.complete or not state.matcher.is_completed():
            return
        # The value may be complete yet still extendable (e.g. a number): finished only if the
        # grammar leaves nothing but the stop tokens.
        state.matcher.fill_next_token_bitmask(self._scratch, 0)
        if torch.equal(self._scratch[0], self._stop_only):
            state.complete = True
            state.events.append(ProcessorEvent(
                self.name, position, "grammar_terminated", {"reason": "JSON value complete; only end of sequence allowed"},
            ))

    def _force_closings(self, bitmask: torch.Tensor, states: list[_RequestState], live: list[int]) -> None:
        """Rows whose budget is running out may only write the shortest closing of their value, one token a step."""
        for index in live:
            state = states[index]
            if not state.forced and not state.complete and state.tokens_left <= CLOSE_WINDOW:
                self._plan_closing(state)
            if state.forced:
                bitmask[index] = bitmask_from_token_ids(state.forced[:1], self.vocab_size)

    def _plan_closing(self, state: _RequestState) -> None:
        closing = shortest_closing(state.matcher)
        if closing is None:  # e.g. inside a character split across tokens: try again after the next token
            if not state.closing_failed:
                state.closing_failed = True
                state.events.append(ProcessorEvent(self.name, state.num_tokens, "closing_not_found", {}))
            return
        tokens = self._tokenizer.encode(closing, add_special_tokens=False).ids if closing else []
        if len(tokens) + CLOSE_MARGIN < state.tokens_left:
            return  # still room to write freely (checked again next step: one token can open a string and more)
        tokens = tokens or self.eos_token_ids[:1]   # complete already: end it while a token is left
        trial = state.matcher.fork()
        if not all(trial.accept_token(token_id) for token_id in tokens):
            if not state.closing_failed:  # this tokenizer spells the closing another way here: try next step
                state.closing_failed = True
                state.events.append(ProcessorEvent(self.name, state.num_tokens, "closing_not_found",
                                                   {"closing": closing}))
            return
        state.forced = list(tokens)
        state.events.append(ProcessorEvent(self.name, state.num_tokens, "closed_for_budget", {
            "closing": closing, "closing_tokens": len(tokens), "tokens_left": state.tokens_left,
        }))

    def _bitmask_rows(self, count: int) -> torch.Tensor:
        if count > self._bitmask.shape[0]:
            self._bitmask = torch.empty((max(count, 2 * self._bitmask.shape[0]), self._bitmask.shape[1]), dtype=torch.int32)
        return self._bitmask[:count]

    def _record_dead_ends(self, bitmask: torch.Tensor, states: list[_RequestState]) -> None:
        dead = ~bitmask.any(dim=1)  # [k] bool: rows where no token is allowed
        if not bool(dead.any()):
            return
        for index in dead.nonzero().flatten().tolist():
            state = states[index]
            if not state.dead_end_recorded:
                state.dead_end_recorded = True
                state.events.append(ProcessorEvent(self.name, state.num_tokens, "dead_end", {}))

    @staticmethod
    def _apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> None:
        all_rows = len(rows) == logits.shape[0]  # rows are ascending and distinct: all rows == 0..n-1
        if logits.is_cuda:
            from engine.kernels.triton_bitmask import apply_token_bitmask_triton  # GPU only: imports triton

            row_index = None if all_rows else torch.tensor(rows, dtype=torch.int64).to(logits.device)
            apply_token_bitmask_triton(logits, bitmask.to(logits.device), row_index)
        else:
            apply_token_bitmask_additive(logits, bitmask, None if all_rows else torch.tensor(rows, dtype=torch.int64))
