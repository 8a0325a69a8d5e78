"""Domain validators, registered by name (`finance.identifiers`, `medical.dose`, `legal.case_citation`, ...).

Each validator takes the `Document` and the rule's parameters and returns `Finding`s: the claims of its
kind it found in the text, each with a verdict, confidence and evidence.
"""

from rules.validators import common, finance, kg_facts, legal, medical, sanctions  # noqa: F401  (registration side effects)
from rules.validators.base import EVALUATOR_VERSION, VALIDATORS, CitationCheck, Finding, Validator

__all__ = ["EVALUATOR_VERSION", "VALIDATORS", "CitationCheck", "Finding", "Validator"]
