"""The base of lpdt's own errors.

Every error class of the project derives from ``LpdtError`` (and from the built-in error it has
always been, e.g. ``ValueError``, so ``except ValueError`` keeps working). Whatever raises one
means a mistake a person can act on (a config, a file, a name, a machine limit): the ``lpdt``
command line prints it as one line (``lpdt.cli.main``; ``LPDT_DEBUG=1`` shows the traceback),
never a traceback. This module imports nothing of lpdt, so every module may import it.
"""

from __future__ import annotations


class LpdtError(Exception):
    """An error of lpdt's making, for a person to act on: the CLI prints it as one line."""
