"""Authoritative-source imports: an organisation's files as versioned overlays on the packaged KGs.

`parse_file(format, data, domain=..., stamp=..., kg=...)` reads one file into an `Overlay` (entities and
facts with per-row provenance) or raises `ImportFileError` naming the line and field of each bad row;
`apply_overlays(packaged, overlays)` gives the KG version the service uses. Storing overlays and versions
is the service's business (`auditor/kg/`); this package reads files and builds graphs, nothing else.
"""

from __future__ import annotations

from collections.abc import Callable

from knowledge_graphs.imports import (
    cases,
    courtlistener,
    ecfr_xml,
    eurlex,
    formulary,
    gleif_lei,
    iso4217_xml,
    ofac_sdn,
    openfda_label,
    rxnorm_rrf,
    sec_tickers,
    triples,
    uslm_xml,
)
from knowledge_graphs.imports.control_chars import control_in, strings_in
from knowledge_graphs.imports.errors import ImportFileError, RowError
from knowledge_graphs.imports.overlay import (
    Overlay,
    OverlayDiff,
    Supersession,
    apply_overlays,
    diff_versions,
    fact_key,
    item_json,
    version_of,
)
from knowledge_graphs.imports.stamp import ImportedProvenance, ImportStamp
from knowledge_graphs.model import KnowledgeGraph

Parser = Callable[..., Overlay]
# format -> (the domain it imports into, None for any; the parser)
FORMATS: dict[str, tuple[str | None, Parser]] = {
    "ofac-sdn": (ofac_sdn.DOMAIN, ofac_sdn.parse),
    "formulary": (formulary.DOMAIN, formulary.parse),
    "cases": (cases.DOMAIN, cases.parse),
    "triples": (None, triples.parse),
    # the public sources' own formats
    "gleif-lei": (gleif_lei.DOMAIN, gleif_lei.parse),
    "sec-tickers": (sec_tickers.DOMAIN, sec_tickers.parse),
    "iso4217-xml": (iso4217_xml.DOMAIN, iso4217_xml.parse),
    "ecfr-xml": (None, ecfr_xml.parse),
    "uslm-xml": (uslm_xml.DOMAIN, uslm_xml.parse),
    "courtlistener-citations": (courtlistener.DOMAIN, courtlistener.parse),
    "eurlex": (None, eurlex.parse),
    "openfda-label": (openfda_label.DOMAIN, openfda_label.parse),
    "rxnorm-rrf": (rxnorm_rrf.DOMAIN, rxnorm_rrf.parse),
}


class ImportFormatError(ValueError):
    """An unknown format, or a format that does not import into the domain asked for."""


def parse_file(fmt: str, data: bytes, *, domain: str, stamp: ImportStamp, kg: KnowledgeGraph) -> Overlay:
    """Read `data` (the whole file) in format `fmt` against the domain's current KG `kg`."""
    if fmt not in FORMATS:
        raise ImportFormatError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    fixed_domain, parser = FORMATS[fmt]
    if fixed_domain is not None and fixed_domain != domain:
        raise ImportFormatError(f"the {fmt} format imports into the {fixed_domain} KG, not {domain}")
    if kg.domain != domain:
        raise ImportFormatError(f"the KG given is the {kg.domain} KG, not {domain}")
    overlay = parser(data, stamp=stamp, kg=kg)
    _refuse_control_characters(overlay, stamp.file_name)
    return overlay


def _refuse_control_characters(overlay: Overlay, file_name: str) -> None:
    """Every format, whatever path its text took (XML, JSON, derived aliases): no stored string may hold a
    terminal or bidi control (`control_chars`); the first one found names its row."""
    for item in (*overlay.entities, *overlay.facts):
        data = item_json(item)
        for path, value in strings_in({k: v for k, v in data.items() if k != "provenance"}):
            if (bad := control_in(value)) is not None:
                line = getattr(item.provenance, "row", 0) or 0
                raise ImportFileError(file_name, [RowError(line, path, bad)])


__all__ = [
    "FORMATS", "ImportFileError", "ImportFormatError", "ImportStamp", "ImportedProvenance", "Overlay",
    "OverlayDiff", "RowError", "Supersession", "apply_overlays", "diff_versions", "fact_key", "parse_file",
    "version_of",
]
