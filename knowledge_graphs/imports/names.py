"""Aliases the formats derive from names: a company without its legal form, a label's first sentence."""

from __future__ import annotations

import re
from functools import lru_cache

# The same legal forms `ofac_sdn` drops, with the SEC's state markers ("/DE/") and a few more forms.
_LEGAL_FORM = re.compile(r"(?:[\s,]+(?:LTD|LIMITED|LLC|L\.L\.C|INC|INCORPORATED|CORP|CORPORATION|CO|COMPANY|PLC|S\.?A|"
                         r"S\.?A\.?S|S\.?R\.?L|S\.?P\.?A|SE|GMBH|AG|JSC|PJSC|OJSC|OOO|ZAO|FZE|FZCO|B\.?V|N\.?V|N\.?A|PTE|"
                         r"SDN BHD|L\.?P|LLP)\.?|\s*/[A-Z]{2,3}/?)+$", re.I)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")
_ORDINARY = 3.5            # wordfreq's Zipf scale: at or above, a word is ordinary English ("Apple", "Target")


def without_legal_form(name: str) -> str | None:
    """'NORTHWIND MARITIME HOLDINGS LTD.' -> 'NORTHWIND MARITIME HOLDINGS': the name as people write it, or None
    when there is no legal form to drop or what is left would name too much (one ordinary English word)."""
    bare = _LEGAL_FORM.sub("", name)
    if bare == name:
        return None
    short = bare.strip(" ,.")
    if not short:
        return None
    words = short.split()
    if len(words) == 1 and _is_ordinary(words[0]):
        return None
    return short


@lru_cache(maxsize=65536)
def _is_ordinary(word: str) -> bool:
    from wordfreq import zipf_frequency

    return len(word) < 4 or zipf_frequency(word, "en") >= _ORDINARY


def first_sentence(text: str, *, limit: int = 400) -> str:
    """The first sentence of a label section (a boxed warning's headline and first statement), at most `limit`
    characters."""
    flat = " ".join(text.split())
    sentence = _SENTENCE_END.split(flat, maxsplit=1)[0]
    return sentence if len(sentence) <= limit else sentence[:limit - 1].rstrip() + "…"
