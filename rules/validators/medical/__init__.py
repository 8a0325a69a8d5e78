"""Medical validators: doses, indications and contraindications, drug classes and brand names,
interactions, ICD-10-CM codes, and drug-like names nobody knows (registered on import)."""

from rules.validators.medical import approval, dose, icd10, interaction, relations, unknown_drug  # noqa: F401  (registration)
