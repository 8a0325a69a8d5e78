"""Legal validators: case citations, statutes and rules, case facts stated in prose (years, courts,
holdings), courts and their Bluebook forms, statutory values, the GDPR (registered on import)."""

from rules.validators.legal import (  # noqa: F401  (registration side effects)
    case_facts,
    citations,
    courts,
    holdings,
    instruments,
    provisions,
)
