"""Medical validators: doses, indications and contraindications, drug classes and brand names,
interactions, ICD-10-CM codes, and drug-like names nobody knows (registered on import)."""

from rules.validators.medical import dose, interaction, legacy, relations  # noqa: F401  (registration side effects)
