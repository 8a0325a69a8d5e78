"""Importing the public sources' own formats: for each, a generated file of `--rows` records in the real layout
(made-up names and numbers), imported as the operator imports it and then followed by a serving process.

Per format: seconds to import (`auditor kg import`'s work in a process of its own: read, check every record,
build the new version, commit it to a SQLite store), the memory the import leaves and its peak, and seconds
until this process (playing a serving replica: linker, validator indexes and the decoding constraint's masks on
the bundled model's tokenizer, as `benchmarks.kg_import`) serves the new version, with the memory that adds.
The formats run one after another in this process, each into a store of its own; a domain's packaged KG and
its warm-up are paid once, before its first format.

Run: python -m benchmarks.kg_import_formats --json [--rows 100000] [--only rxnorm-rrf]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.kg_import import _constraint_processor, _word, imported_and_served

Generator = Callable[[Path, int, random.Random], Path]
_LEGAL_FORMS = ["LTD.", "LLC", "INC", "AG", "S.A.", "GMBH", "PLC", "CORP"]
_COUNTRIES = ["US", "GB", "DE", "FR", "CH", "CY", "NL", "LU", "IE", "JP", "XK"]


def gleif_file(path: Path, rows: int, rng: random.Random) -> Path:
    from stdnum.iso7064 import mod_97_10

    lines = ['"LEI","Entity.LegalName","Entity.OtherEntityNames.OtherEntityName.1","Entity.LegalAddress.City",'
             '"Entity.LegalAddress.Country","Entity.LegalJurisdiction","Entity.EntityStatus",'
             '"Registration.RegistrationStatus"']
    for i in range(rows):
        base = f"5493{i:014d}"
        name = f"{_word(rng, 2).upper()} {_word(rng, 3).upper()} {rng.choice(_LEGAL_FORMS)}"
        other = f"{_word(rng, 3)} Trading" if i % 4 == 0 else ""
        country = rng.choice(_COUNTRIES)
        status = rng.choice(["ISSUED"] * 6 + ["LAPSED", "RETIRED", "MERGED"])
        lines.append(f'"{base}{mod_97_10.calc_check_digits(base)}","{name}","{other}","{_word(rng, 2)}","{country}",'
                     f'"{country}","{"ACTIVE" if status == "ISSUED" else "INACTIVE"}","{status}"')
    path.write_text("\n".join(lines) + "\n")
    return path


def sec_file(path: Path, rows: int, rng: random.Random) -> Path:
    data: list[list[Any]] = []
    cik = 1_000_000
    while len(data) < rows:
        cik += rng.randint(1, 40)
        name = f"{_word(rng, 2)} {_word(rng, 2)} {rng.choice(['Inc.', 'Corp', 'Holdings Inc', 'Ltd'])}"
        exchange = rng.choice(["Nasdaq", "NYSE", "OTC", "CBOE", None])
        for share_class in range(rng.choice([1, 1, 1, 2])):     # a fifth-ish with two share classes
            data.append([cik, name, f"T{cik:07d}{'AB'[share_class]}", exchange])
    path.write_text(json.dumps({"fields": ["cik", "name", "ticker", "exchange"], "data": data[:rows]}))
    return path


def iso4217_file(path: Path, rows: int, rng: random.Random) -> Path:
    """Entries for made-up territories (none resolves to a country), sharing 3-letter codes as the list does."""
    entries = []
    for i in range(rows):
        code = "".join(chr(65 + (i // 26**k) % 26) for k in (2, 1, 0))
        entries.append(f"<CcyNtry><CtryNm>{_word(rng, 3).upper()} TERRITORY {i}</CtryNm><CcyNm>{_word(rng, 2)}"
                       f"</CcyNm><Ccy>Q{code[1:]}</Ccy><CcyNbr>{(i % 676) % 1000:03d}</CcyNbr>"
                       f"<CcyMnrUnts>{rng.choice('0223')}</CcyMnrUnts></CcyNtry>")
    path.write_text('<?xml version="1.0" encoding="UTF-8"?>\n<ISO_4217 Pblshd="2024-06-25"><CcyTbl>\n'
                    + "\n".join(entries) + "\n</CcyTbl></ISO_4217>\n")
    return path


def ecfr_file(path: Path, rows: int, rng: random.Random) -> Path:
    """A whole made-up title 99: parts of 100 sections, a third of them stating a dollar threshold."""
    out = ['<?xml version="1.0" encoding="UTF-8"?>\n<DIV1 N="99" TYPE="TITLE"><HEAD>Title 99—Benchmarks</HEAD>']
    sections_per_part = 100
    for start in range(0, rows, sections_per_part + 1):
        part = 1000 + start // (sections_per_part + 1)
        out.append(f'<DIV5 N="{part}" TYPE="PART"><HEAD>PART {part}—{_word(rng, 3).upper()} RULES</HEAD>')
        for number in range(1, min(sections_per_part, rows - start - 1) + 1):
            amount = f"${rng.randint(1, 99) * 1000:,}"
            text = (f"A {_word(rng, 2).lower()} transaction of more than {amount} shall be reported."
                    if number % 3 == 0 else f"Each {_word(rng, 2).lower()} shall keep records.")
            out.append(f'<DIV8 N="§ {part}.{number}" TYPE="SECTION"><HEAD>§ {part}.{number} {_word(rng, 3)} '
                       f"requirements.</HEAD><P>(a) {text}</P></DIV8>")
        out.append("</DIV5>")
    out.append("</DIV1>\n")
    path.write_text("\n".join(out))
    return path


def uslm_file(path: Path, rows: int, rng: random.Random) -> Path:
    out = ['<?xml version="1.0" encoding="UTF-8"?>\n<uscDoc xmlns="http://xml.house.gov/schemas/uslm/1.0" '
           'identifier="/us/usc/t99"><main><title identifier="/us/usc/t99"><num value="99">Title 99—</num>']
    for number in range(1, rows + 1):
        out.append(f'<section identifier="/us/usc/t99/s{number}"><num value="{number}">§ {number}.</num>'
                   f"<heading> {_word(rng, 3)} {_word(rng, 2).lower()}</heading><content>Text.</content></section>")
    out.append("</title></main></uscDoc>\n")
    path.write_text("\n".join(out))
    return path


def courtlistener_file(path: Path, rows: int, rng: random.Random) -> Path:
    """Three citations per cluster (U.S., S. Ct., L. Ed. 2d) in volumes no real case has yet."""
    lines = ["id,volume,reporter,page,type,cluster_id,date_created,date_modified,case_name,case_name_short,date_filed"]
    for i in range(rows):
        cluster = i // 3
        reporter, base = [("U.S.", 700), ("S. Ct.", 300), ("L. Ed. 2d", 300)][i % 3]
        year = 1950 + cluster % 75
        name = f"{_word(rng, 3)} v. {_word(rng, 2)}" if i % 3 == 0 else lines[-1].split(",")[8]
        lines.append(f"{i + 1},{base + cluster // 1000},{reporter},{cluster % 1000 + 1},1,{cluster + 1},x,x,{name},"
                     f"{name.split(' v. ')[0]},{year}-06-{cluster % 28 + 1:02d}")
    path.write_text("\n".join(lines) + "\n")
    return path


def eurlex_file(path: Path, rows: int, rng: random.Random) -> Path:
    lines = ["CELEX number,Title,Date of document,Date of effect,Form"]
    for i in range(rows):
        year, number, kind = 1990 + i % 35, i // 35 + 1, rng.choice("RRLD")
        lines.append(f'3{year}{kind}{number:04d},"Act {i} on {_word(rng, 3).lower()} {_word(rng, 2).lower()}",'
                     f"{rng.randint(1, 28):02d}/{rng.randint(1, 12):02d}/{year},"
                     f"{rng.randint(1, 28):02d}/{rng.randint(1, 12):02d}/{year + 1}; 01/01/{year + 2},Act")
    path.write_text("\n".join(lines) + "\n")
    return path


def openfda_file(path: Path, rows: int, rng: random.Random) -> Path:
    """Labels of 3,000 made-up generics (repackagers repeat them) in 300 classes."""
    generics = [f"{_word(rng, 3).upper()} {rng.choice(['HYDROCHLORIDE', 'SODIUM', 'TABLETS', ''])}".strip()
                for _ in range(3000)]
    classes = [f"{_word(rng, 3)} Inhibitor [EPC]" for _ in range(300)]
    results = []
    for i in range(rows):
        label: dict[str, Any] = {"id": f"id-{i}", "set_id": f"set-{i}", "effective_time": f"20{rng.randint(10, 24)}0115",
                                 "openfda": {"brand_name": [f"{_word(rng, 2).upper()}{i % 7}"],
                                             "generic_name": [rng.choice(generics)],
                                             "pharm_class_epc": [rng.choice(classes)]} if i % 10 else {}}
        if i % 5 == 0:
            label["boxed_warning"] = [f"WARNING: {_word(rng, 3).upper()} Serious risk. Monitor patients closely."]
        if i % 3:
            label["contraindications"] = [f"4 CONTRAINDICATIONS Hypersensitivity to {_word(rng, 3).lower()}."]
        results.append(label)
    path.write_text(json.dumps({"meta": {"results": {"total": rows}}, "results": results}, indent=1))
    return path


def rxnorm_file(path: Path, rows: int, rng: random.Random) -> Path:
    """RXNCONSO's mix: a third RxNorm's own IN/BN rows, the rest other sources and term types."""
    lines = []
    for i in range(rows):
        sab, tty = rng.choice([("RXNORM", "IN"), ("RXNORM", "BN"), ("RXNORM", "SCD"), ("RXNORM", "SY"),
                               ("MTHSPL", "SU"), ("MMSL", "BD"), ("RXNORM", "IN")])
        rxcui = 5_000_000 + i
        lines.append(f"{rxcui}|ENG||||||{i + 1}|{i + 1}|{rxcui}||{sab}|{tty}|{rxcui}|{_word(rng, 3).lower()}zine||"
                     f"{rng.choice('NNNNNO')}|4096|")
    path.write_text("\n".join(lines) + "\n")
    return path


# format -> (domain, generator, file name)
FORMATS: dict[str, tuple[str, Generator, str]] = {
    "gleif-lei": ("finance", gleif_file, "gleif.csv"),
    "sec-tickers": ("finance", sec_file, "company_tickers_exchange.json"),
    "iso4217-xml": ("finance", iso4217_file, "list_one.xml"),
    "ecfr-xml": ("finance", ecfr_file, "title-99.xml"),
    "eurlex": ("finance", eurlex_file, "eurlex.csv"),
    "uslm-xml": ("legal", uslm_file, "usc99.xml"),
    "courtlistener-citations": ("legal", courtlistener_file, "courtlistener.csv"),
    "openfda-label": ("medical", openfda_file, "drug-label.json"),
    "rxnorm-rrf": ("medical", rxnorm_file, "RXNCONSO.RRF"),
}


class _Replica:
    """A serving process's per-domain state, warmed once per domain (`benchmarks.kg_import.run_one` does the same)."""

    def __init__(self) -> None:
        self.warmed: dict[str, tuple[Any, Any]] = {}

    def serve(self, fmt: str, domain: str, path: Path, store: str) -> dict[str, Any]:
        from auditor.serving import runtime
        from knowledge_graphs import packaged_kg

        if domain not in self.warmed:
            packaged = packaged_kg(domain)
            warm = runtime.kg_listeners(None, None, None)[0]
            warm(packaged)
            self.warmed[domain] = (warm, _constraint_processor(domain, packaged))
        warm, processor = self.warmed[domain]
        with imported_and_served(fmt, domain, path, store, [warm, lambda kg: processor.register(kg, domain=domain)]) as row:
            return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--only", choices=list(FORMATS), action="append", help="these formats only (repeatable)")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="kg-import-formats-"))
    rng = random.Random(41)
    replica = _Replica()
    results = []
    # one domain after another, so each domain's packaged KG and warm-up are paid once
    for fmt, (domain, generate, file_name) in sorted(FORMATS.items(), key=lambda item: item[1][0]):
        if args.only and fmt not in args.only:
            continue
        path = generate(workdir / file_name, args.rows, rng)
        results.append(replica.serve(fmt, domain, path, f"sqlite:///{workdir / f'{fmt}.db'}"))
        if not args.json:
            print(json.dumps(results[-1]), flush=True)
    report = {"benchmark": "kg_import_formats", "rows": args.rows, "cpus": os.cpu_count(),
              "load_average": [round(x, 2) for x in os.getloadavg()], "results": results}
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
