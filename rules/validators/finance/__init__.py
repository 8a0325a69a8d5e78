"""Finance validators: identifiers, currency and country codes, IBAN lengths, FATF / EU list membership
against dated snapshots, and regulatory thresholds (registered on import)."""

from rules.validators.finance import (  # noqa: F401  (registration side effects)
    aggregation,
    codes,
    iban_length,
    identifiers,
    lists,
    regulation_subject,
    thresholds,
)
