"""What KG version operations raise."""

from __future__ import annotations


class KgVersionError(ValueError):
    """A version reference, rollback or import the store cannot carry out (unknown version, wrong domain)."""


class KgIntegrityError(KgVersionError):
    """A KG version or overlay in the store fails its integrity check (altered, forged or deleted by someone
    with database access): it is never served, and nothing is built on it."""
