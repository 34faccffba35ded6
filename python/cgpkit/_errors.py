"""cgpkit's one exception type: every error of the C++ engine, named."""


class Error(Exception):
    """An error of cgpkit: `code` (e.g. "out_of_range"), the `parameter` it names, a message."""

    def __init__(self, code: str, parameter: str, message: str):
        super().__init__(message)
        self.code = code
        self.parameter = parameter
        self.message = message

    def __repr__(self) -> str:
        return f"cgpkit.Error({self.code!r}, {self.parameter!r}, {self.message!r})"
