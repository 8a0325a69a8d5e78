"""What text each token id adds to the output, read from a `tokenizers.Tokenizer`.

`Tokenizer.decode([id])` is no good for this: a Metaspace decoder strips the leading space of the
first piece ("▁Aspirin" -> "Aspirin") and a byte-level piece that holds part of a UTF-8 character
decodes to U+FFFD. So the vocabulary pieces are mapped to raw bytes by the rules of the decoder
family (byte-level BPE: GPT-2 byte<->unicode table; sentencepiece style: "▁" is a space and
"<0xNN>" a byte), and special tokens add nothing (the engine decodes with skip_special_tokens).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

from tokenizers import Tokenizer

_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
METASPACE = "\u2581"


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable-unicode stand-in for each byte, inverted."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    codes = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return {chr(code): byte for byte, code in zip(printable, codes, strict=True)}


def _decoder_types(node: object) -> set[str]:
    if isinstance(node, dict):
        found = {node["type"]} if isinstance(node.get("type"), str) else set()
        for value in node.values():
            found |= _decoder_types(value)
        return found
    if isinstance(node, list):
        return set().union(*(_decoder_types(v) for v in node)) if node else set()
    return set()


def token_bytes(tokenizer: Tokenizer, vocab_size: int) -> list[bytes]:
    """Bytes each token id in [0, vocab_size) adds to the decoded text (b"" for special/unused ids)."""
    config = json.loads(tokenizer.to_str())
    decoders = _decoder_types(config.get("decoder"))
    byte_level = "ByteLevel" in decoders
    byte_fallback = "ByteFallback" in decoders
    metaspace = "Metaspace" in decoders or any(
        r.get("pattern", {}).get("String") == METASPACE for r in _replace_rules(config.get("decoder"))
    )
    special = {index for index, added in tokenizer.get_added_tokens_decoder().items() if added.special}
    added = {index for index in tokenizer.get_added_tokens_decoder()} - special
    table = _byte_decoder()
    out: list[bytes] = []
    for index in range(vocab_size):
        piece = tokenizer.id_to_token(index)
        if piece is None or index in special:
            out.append(b"")
        elif index in added:
            out.append(piece.encode())
        elif byte_level and all(ch in table for ch in piece):
            out.append(bytes(table[ch] for ch in piece))
        elif byte_fallback and (match := _BYTE_PIECE.match(piece)):
            out.append(bytes([int(match.group(1), 16)]))
        elif metaspace:
            out.append(piece.replace(METASPACE, " ").encode())
        else:
            out.append(piece.encode())
    return out


def _replace_rules(node: object) -> list[dict]:
    if isinstance(node, dict):
        rules = [node] if node.get("type") == "Replace" else []
        for value in node.values():
            rules += _replace_rules(value)
        return rules
    if isinstance(node, list):
        return [r for v in node for r in _replace_rules(v)]
    return []


def token_texts(tokenizer: Tokenizer, vocab_size: int) -> list[str]:
    """Per token, its bytes decoded on their own (a partial UTF-8 character becomes U+FFFD)."""
    return [b.decode("utf-8", errors="replace") for b in token_bytes(tokenizer, vocab_size)]
