"""``gradax``'s entry point: parse the arguments, run the command, turn usage errors into exit code 2.

The commands live one per module (``_train``, ``_compare``, ``_leaderboard``, ``_schedule``, ``_demo``, ``_bench``)
and their arguments in ``_parser``.
"""

from __future__ import annotations

import sys

from ._checkpoint import OutputError
from ._common import EXIT_USAGE, CliError
from ._expr import ExpressionError
from ._leaderboard import LeaderboardError
from ._parser import build_parser
from ._run import EXIT_INTERRUPTED
from ._tasks import TaskError

#: Errors reported as ``gradax: error: <message>`` with exit code :data:`EXIT_USAGE` (no traceback).
USAGE_ERRORS = (ExpressionError, CliError, TaskError, OutputError, LeaderboardError)


def main(argv: list[str] | None = None) -> int:
    """Run ``gradax ARGS`` (``argv``, default ``sys.argv[1:]``) and return its exit code."""
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra and args.command != "bench":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.bench_args = extra
    except SystemExit as e:  # argparse already printed its message
        return int(e.code or 0)
    try:
        return args.func(args)
    except USAGE_ERRORS as e:
        print(f"gradax: error: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        print("gradax: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_USAGE
