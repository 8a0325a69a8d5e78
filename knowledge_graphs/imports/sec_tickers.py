"""`sec-tickers`: the SEC's `company_tickers_exchange.json` (EDGAR's company, ticker and exchange list).

One JSON object, written on one line: {"fields": ["cik", "name", "ticker", "exchange"], "data": [[320193,
"Apple Inc.", "AAPL", "Nasdaq"], ...]}: a record per ticker, so a company with several share classes has
several. The columns are found by the names in "fields"; the exchange may be null (no listing the SEC knows).
A bad record is named by its path and field (`data[12].ticker`) as well as its line.

Each CIK becomes a `company` (`cik:<10-digit CIK>`) named as the SEC writes it, with the name without its legal
form as an alias where that still names one company, and the facts `has_cik` (the 10-digit CIK), `has_ticker`
(one per ticker) and `listed_on_exchange` (the KG's exchange of that name, else an `exchange:<name>` entity
made here).
"""

from __future__ import annotations

import re
from typing import Any

from knowledge_graphs.curated import slugify
from knowledge_graphs.imports.errors import ErrorLog, FieldError
from knowledge_graphs.imports.json_records import JsonItem, checked_items, json_array
from knowledge_graphs.imports.names import without_legal_form
from knowledge_graphs.imports.overlay import Overlay
from knowledge_graphs.imports.rows import decode, text
from knowledge_graphs.imports.stamp import ImportStamp
from knowledge_graphs.model import Entity, Fact, KnowledgeGraph, Provenance

DOMAIN = "finance"
FIELDS = ("cik", "name", "ticker", "exchange")
SOURCE = "U.S. SEC EDGAR company_tickers_exchange.json"
EXCHANGE_NAMES = {"nasdaq": "Nasdaq", "nyse": "New York Stock Exchange", "cboe": "Cboe", "otc": "OTC Markets"}
EXCHANGE_ALIASES = {"nasdaq": ["NASDAQ", "Nasdaq Stock Market"], "nyse": ["NYSE"], "cboe": ["CBOE", "Cboe BZX"],
                    "otc": ["OTC"]}
_TICKER = re.compile(r"^[A-Z0-9][A-Z0-9.\-]{0,11}$")


def parse(data: bytes, *, stamp: ImportStamp, kg: KnowledgeGraph) -> Overlay:
    log = ErrorLog(stamp.file_name)
    overlay = Overlay(DOMAIN, stamp.overlay)
    document = json_array(decode(data, log) or "", log, "data")
    if document is None:
        log.raise_if_any()
    assert document is not None
    fields = document.top.get("fields")
    if fields is None or not isinstance(fields, list) or any(name not in fields for name in FIELDS):
        log.add(1, "fields", f"must list {', '.join(FIELDS)}, got {fields!r}")
        log.raise_if_any()
    assert isinstance(fields, list)
    companies: dict[str, Entity] = {}
    exchanges: dict[str, Entity] = {}
    seen: dict[tuple[str, str], int] = {}

    def read(item: JsonItem) -> list[Fact]:
        return _listing(item, fields, stamp, kg, companies, exchanges, seen)

    for facts in checked_items(document.items, log, "data", read):
        overlay.facts += facts
        overlay.rows += 1
    log.raise_if_any()
    overlay.entities += [*exchanges.values(), *companies.values()]
    return overlay


def _listing(item: JsonItem, fields: list[Any], stamp: ImportStamp, kg: KnowledgeGraph, companies: dict[str, Entity],
             exchanges: dict[str, Entity], seen: dict[tuple[str, str], int]) -> list[Fact]:
    if not isinstance(item.value, list) or len(item.value) != len(fields):
        raise FieldError(None, f"must be a list of {len(fields)} values ({', '.join(map(str, fields))})")
    record = dict(zip(fields, item.value, strict=True))
    raw_cik = record["cik"]
    if isinstance(raw_cik, bool) or not (isinstance(raw_cik, int) or isinstance(raw_cik, str) and raw_cik.isdigit()):
        raise FieldError("cik", f"must be a whole number, got {raw_cik!r}")
    cik = f"{int(raw_cik):010d}"
    if len(cik) > 10 or int(cik) == 0:
        raise FieldError("cik", f"must be 1 to 10 digits, got {raw_cik!r}")
    name = text(record, "name")
    ticker = (text(record, "ticker") or "").upper()
    if not _TICKER.match(ticker):
        raise FieldError("ticker", f"{ticker!r} is not a ticker symbol")
    if (cik, ticker) in seen:
        raise FieldError("ticker", f"CIK {cik} with {ticker} already appears at data[{seen[cik, ticker]}]")
    exchange = text(record, "exchange", required=False)
    assert name is not None
    seen[cik, ticker] = item.index
    company_id = f"cik:{cik}"
    provenance = stamp.provenance(source=SOURCE, line=item.line, what=f"data[{item.index}], CIK {cik}, {ticker}")
    facts = []
    if company_id not in companies:
        short = without_legal_form(name)
        companies[company_id] = Entity(company_id, "company", name, [short] if short else [], {"cik": cik},
                                       provenance)
        facts.append(Fact(company_id, "has_cik", value=cik, provenance=provenance))
    facts.append(Fact(company_id, "has_ticker", value=ticker, provenance=provenance))
    if exchange is not None:
        exchange_id = _exchange(exchange, stamp, kg, exchanges)
        facts.append(Fact(company_id, "listed_on_exchange", exchange_id, qualifiers={"ticker": ticker},
                          provenance=provenance))
    return facts


def _exchange(name: str, stamp: ImportStamp, kg: KnowledgeGraph, exchanges: dict[str, Entity]) -> str:
    """The KG's exchange the SEC's name means (by name or alias), else `exchange:<name>`, made once."""
    known = list(dict.fromkeys(e.id for e in kg.lookup(name) if e.type == "exchange"))
    if len(known) == 1:
        return known[0]
    key = slugify(name)
    if not key:
        raise FieldError("exchange", f"{name!r} is not an exchange name")
    exchange_id = f"exchange:{key}"
    if kg.entity(exchange_id) is None and exchange_id not in exchanges:
        full_name = EXCHANGE_NAMES.get(key, name)
        aliases = [a for a in dict.fromkeys([name, *EXCHANGE_ALIASES.get(key, [])]) if a != full_name]
        exchanges[exchange_id] = Entity(exchange_id, "exchange", full_name, aliases, {"sec_name": name}, Provenance(
            SOURCE, f"{stamp.file_name} (sha256 {stamp.file_sha256[:12]})", stamp.as_of))
    return exchange_id
