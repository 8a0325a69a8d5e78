"""The safety gate: input stage (PII, prompt injection, domain policy) and output stage (validators)."""
