"""The one exception a user's mistake raises: `PipelineError`, whose message names the bad value and the fix. The
CLI prints it as one line and exits with status 2; anything else is a bug and keeps its traceback."""


class PipelineError(Exception):
    """A mistake the user can fix; the message says what was wrong and how to fix it."""
