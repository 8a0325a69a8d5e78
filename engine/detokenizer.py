"""Incremental detokenisation and stop strings, per sequence, a few tokens at a time."""

from __future__ import annotations

from engine.sequence import Sequence
from engine.tokenizer import Tokenizer

# tokens of prompt context decoded with the first output tokens, so a leading-space marker renders right
_PREFIX_CONTEXT = 5


def init_offsets(seq: Sequence) -> None:
    seq.read_offset = seq.num_prompt_tokens
    seq.prefix_offset = max(seq.read_offset - _PREFIX_CONTEXT, 0)


def append_text(tokenizer: Tokenizer, seq: Sequence) -> str:
    """Decode seq's newest tokens; returns the text delta (empty while a UTF-8 char is incomplete).

    vLLM's scheme: decode a small window before and after the new tokens and take the difference,
    so byte-level BPE pieces and leading-space markers come out exactly as a full decode would.
    """
    prefix_text = tokenizer.decode(seq.token_slice(seq.prefix_offset, seq.read_offset))
    full_text = tokenizer.decode(seq.token_slice(seq.prefix_offset))
    if len(full_text) <= len(prefix_text) or full_text.endswith("\ufffd"):
        return ""
    delta = full_text[len(prefix_text) :]
    seq.prefix_offset, seq.read_offset = seq.read_offset, seq.num_tokens
    seq.text += delta
    return delta


def find_stop(seq: Sequence, delta_len: int) -> str | None:
    """If a stop string now appears in seq.text, cut the text before it and return that stop string."""
    text = seq.text
    for stop in seq.params.stop:
        if not stop:
            continue
        # only the region the new text could complete needs searching
        start = max(0, len(text) - delta_len - len(stop) + 1)
        index = text.find(stop, start)
        if index != -1:
            seq.text = text[:index]
            return stop
    return None


def streamable_length(seq: Sequence) -> int:
    """Chars of seq.text safe to stream: hold back a tail that may still grow into a stop string."""
    text = seq.text
    if seq.is_finished or not seq.params.stop:
        return len(text)
    hold = 0
    for stop in seq.params.stop:
        for k in range(min(len(stop) - 1, len(text)), hold, -1):
            if text.endswith(stop[:k]):
                hold = k
                break
    return len(text) - hold
