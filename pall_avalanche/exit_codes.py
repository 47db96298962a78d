"""How a command ends: one line on stderr and an exit code for each way (:func:`main_guard`),
warnings as one line each, the installed command's name in both (:func:`program_name`).

=====  ===================================================================================
code   meaning
=====  ===================================================================================
0      done
1      a failure while running (a run that failed, a file that could not be written)
2      bad input, refused before anything trains
3      the report was written without the runs that diverged (:class:`RunsLeftOut`)
130    Ctrl-C (finished records stay; a rerun resumes the others)
=====  ===================================================================================
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from pall_avalanche.requests import InvalidRequestSequence

__all__ = ["EXIT_INTERRUPTED", "EXIT_RUNS_LEFT_OUT", "RunsLeftOut", "main_guard",
           "program_name"]

#: The exit code of a script that wrote its report without the runs that diverged.
EXIT_RUNS_LEFT_OUT = 3
#: The exit code after Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130


class RunsLeftOut(RuntimeError):
    """A script finished its other runs and wrote its report, without the runs that diverged
    (they have no record; a rerun tries them again): exit code :data:`EXIT_RUNS_LEFT_OUT`."""



def program_name(default: str) -> str:
    """The name to show for this program: the installed command when it was run as one
    (``pall-table1``), else ``default`` (``table1.py``)."""
    invoked = Path(sys.argv[0]).name
    return invoked if invoked.startswith("pall-") else default


def main_guard(main: Callable[[Sequence[str] | None], Any], argv: Sequence[str] | None = None,
               *, prog: str) -> NoReturn:
    """Run ``main``; bad input ends the program with one line on stderr (``prog: error:
    ...``) and exit code 2, a failure while running (a run that failed, a record that could
    not be written: the message says where it was kept) with one line and exit code 1, a
    report written without the runs that diverged (:class:`RunsLeftOut`) with one line and
    exit code 3, Ctrl-C with one line and exit code 130 (finished records stay; a rerun
    resumes); warnings print as one line each (``prog: warning: ...``)."""
    prog = program_name(prog)
    warnings.formatwarning = lambda message, *args, **kwargs: f"{prog}: warning: {message}\n"
    try:
        main(argv)
    except (ValueError, FileNotFoundError, InvalidRequestSequence) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        sys.exit(2)
    except RunsLeftOut as err:
        print(f"{prog}: {err}", file=sys.stderr)
        sys.exit(EXIT_RUNS_LEFT_OUT)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; the finished records are kept, and a rerun of the same "
              "command reuses them and resumes the others from their checkpoints",
              file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except (OSError, RuntimeError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        sys.exit(1)
    sys.exit(0)
