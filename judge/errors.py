"""The one exception type for mistakes a user can make (bad files, bad fields, bad patches)."""


class JudgeError(Exception):
    """A user-facing error: the message names the file, field or hunk, and fits on one line."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class NotFound(JudgeError):
    """A JudgeError for something named that the ledger does not hold (judge's server answers it with 404)."""
