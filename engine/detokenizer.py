"""Incremental detokenisation and stop strings for one request, a few tokens at a time.

It runs in the output processor (`engine.output_processor`), beside the engine core rather than inside its
step: with the core in its own process, text is made in the API process and the step loop never decodes."""

from __future__ import annotations

from collections.abc import Sequence

from engine.tokenizer import Tokenizer

# tokens of prompt context decoded with the first output tokens, so a leading-space marker renders right
_PREFIX_CONTEXT = 5


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Tokenizer, prompt_token_ids: Sequence[int], stop: Sequence[str]) -> None:
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        # only the window the first decodes need, not the whole prompt
        self.token_ids: list[int] = list(prompt_token_ids[-_PREFIX_CONTEXT:])
        self.read_offset = len(self.token_ids)
        self.prefix_offset = 0
        self.text = ""

    def append(self, token_id: int) -> str | None:
        """Add one token's text; return the stop string it completed (the text is then cut before it)."""
        self.token_ids.append(token_id)
        delta = self._decode_newest()
        if delta and self.stop:
            return self._find_stop(len(delta))
        return None

    def _decode_newest(self) -> str:
        """vLLM's scheme: decode a small window before and after the new tokens and take the difference,
        so byte-level BPE pieces and leading-space markers come out exactly as a full decode would.
        Returns "" while a UTF-8 character is incomplete."""
        prefix_text = self.tokenizer.decode(self.token_ids[self.prefix_offset : self.read_offset])
        full_text = self.tokenizer.decode(self.token_ids[self.prefix_offset :])
        if len(full_text) <= len(prefix_text) or full_text.endswith("\ufffd"):
            return ""
        delta = full_text[len(prefix_text) :]
        self.prefix_offset, self.read_offset = self.read_offset, len(self.token_ids)
        self.text += delta
        if self.prefix_offset > 64:   # keep the window small: drop what no decode reads again
            del self.token_ids[: self.prefix_offset]
            self.read_offset -= self.prefix_offset
            self.prefix_offset = 0
        return delta

    def _find_stop(self, delta_len: int) -> str | None:
        text = self.text
        for stop in self.stop:
            # only the region the new text could complete needs searching
            start = max(0, len(text) - delta_len - len(stop) + 1)
            index = text.find(stop, start)
            if index != -1:
                self.text = text[:index]
                return stop
        return None

    def streamable_length(self, finished: bool) -> int:
        """Chars of the text safe to stream: hold back a tail that may still grow into a stop string."""
        text = self.text
        if finished or not self.stop:
            return len(text)
        hold = 0
        for stop in self.stop:
            for k in range(min(len(stop) - 1, len(text)), hold, -1):
                if text.endswith(stop[:k]):
                    hold = k
                    break
        return len(text) - hold
