"""The one-line exit: an error every layer may raise and only the command line prints."""


class Exit(Exception):
    """A clean, one-message exit with a status code (2: bad input or setup, 1: something failed)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
