"""The one exception type for bad user input (sizes, files, task names).

The command-line layer turns it into exit code 2 and a single line; library code raises it
instead of asserting, so a bad input never produces a traceback or a half-written file.
"""


class BadInput(ValueError):
    """User input that cannot be processed; the message names what is wrong."""
