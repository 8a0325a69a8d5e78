"""Claims, validators, rule packs and scores: `verify(text, domain) -> Report`."""

from rules.packs import PackError, RulePack, load_pack
from rules.report import Citation, Claim, Evidence, GateAction, Report, Versions
from rules.verify import EmptyTextError, UnknownDomainError, verify, verify_many

__all__ = [
    "Citation", "Claim", "EmptyTextError", "Evidence", "GateAction", "PackError", "Report", "RulePack",
    "UnknownDomainError", "Versions", "load_pack", "verify", "verify_many",
]
