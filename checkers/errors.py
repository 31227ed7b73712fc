"""The one exception type for bad user input (sizes, files, task names).

The command-line layer turns it into exit code 2 and a single line; library code raises it
instead of asserting, so a bad input never produces a traceback or a half-written file.
"""


class BadInput(ValueError):
    """User input that cannot be processed; the message names what is wrong."""


class TooManyPoints(BadInput):
    """A dataset with more than 2^62 points: its indices would not fit the 64-bit point numbers
    (--point N, journals, shards).  Commands that do not enumerate (--all-sizes) say what to do instead."""
