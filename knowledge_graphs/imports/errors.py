"""Import errors that name the line and the field, collected so one run reports every bad row (up to a cap)."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_REPORTED = 20


@dataclass(frozen=True, slots=True)
class RowError:
    line: int
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}" + (f", field {self.field!r}" if self.field else "")
        return f"{where}: {self.message}"


class ImportFileError(ValueError):
    """The file is rejected as a whole: nothing of it is imported."""

    def __init__(self, file_name: str, errors: list[RowError], *, more: int = 0) -> None:
        self.file_name, self.errors, self.more = file_name, errors, more
        first = f"{file_name}: {errors[0]}" if errors else f"{file_name}: rejected"
        rest = len(errors) - 1 + more
        super().__init__(first + (f" (and {rest} more error{'s' if rest != 1 else ''})" if rest else ""))

    def lines(self) -> list[str]:
        """Every collected error, one per line, then how many more were not kept."""
        out = [f"{self.file_name}: {error}" for error in self.errors]
        if self.more:
            out.append(f"{self.file_name}: ... and {self.more} more")
        return out


class FieldError(ValueError):
    """Raised by a field check; the row loop adds the line."""

    def __init__(self, field_name: str | None, message: str) -> None:
        super().__init__(message)
        self.field = field_name


@dataclass(slots=True)
class ErrorLog:
    file_name: str
    errors: list[RowError] = field(default_factory=list)
    more: int = 0

    def add(self, line: int, field_name: str | None, message: str) -> None:
        if len(self.errors) < MAX_REPORTED:
            self.errors.append(RowError(line, field_name, message))
        else:
            self.more += 1

    def raise_if_any(self) -> None:
        if self.errors:
            raise ImportFileError(self.file_name, self.errors, more=self.more)
