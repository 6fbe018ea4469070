"""Errors a user can fix. The CLI prints them as one line and exits 2."""


class UsageError(ValueError):
    """Bad input: an unknown model, a malformed token list, a missing file."""
