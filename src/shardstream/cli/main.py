"""The command line's entry point: arguments, logging, and the exit codes."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from shardstream._version import __version__
from shardstream.cli import benchmark, conversion, info, merging, simulation, validation
from shardstream.errors import ShardstreamError

__all__ = ["EXIT_DATA_PROBLEMS", "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "main"]

EXIT_OK = 0
#: ``validate`` found samples or files that are not what the index says.
EXIT_DATA_PROBLEMS = 1
#: The command line is wrong (argparse's own code).
EXIT_USAGE = 2
#: shardstream could not do what was asked: the message names the object and the fix.
EXIT_FAILED = 3
EXIT_INTERRUPTED = 130

_EPILOG = """\
exit codes: 0 success; 1 validate found problems; 2 wrong command line; 3 the command failed
(the message says what and what to do); 130 interrupted.
"""


def build_parser() -> argparse.ArgumentParser:
    """The parser of every sub-command."""
    parser = argparse.ArgumentParser(
        prog="shardstream",
        description="Turn data into MDS shards, look inside datasets, check and merge them, "
        "and see how a cluster will read them.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"shardstream {__version__}")
    _add_common(parser, quiet=False, verbose=0)
    # The same options after the command name ("shardstream validate DS -q"); unset there,
    # they leave what was given before it.
    common = argparse.ArgumentParser(add_help=False)
    _add_common(common, quiet=argparse.SUPPRESS, verbose=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (conversion, info, validation, merging, benchmark, simulation):
        module.register(commands, [common])
    return parser


def _add_common(parser: argparse.ArgumentParser, *, quiet: object, verbose: object) -> None:
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=quiet,
        help="no progress bars; only results and errors",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=verbose,
        help="more log lines (-v info, -vv debug)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        code: int = args.run(args)
    except ShardstreamError as exc:
        print(f"shardstream {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"shardstream {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return code
