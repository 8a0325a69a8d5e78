"""Finance validators: identifiers, currency and country codes, IBAN lengths, FATF / EU list membership
against dated snapshots, and regulatory thresholds (registered on import)."""

from rules.validators.finance import aggregation, codes, iban_length, identifiers, lists, thresholds  # noqa: F401  (registration side effects)
