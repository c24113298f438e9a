"""The command line's entry point: arguments, logging, and the exit codes."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from shardstream._version import __version__
from shardstream.cli import benchmark, conversion, info, merging, simulation, validation
from shardstream.errors import ShardstreamError

__all__ = ["EXIT_DATA_PROBLEMS", "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "cli_terms", "main"]

EXIT_OK = 0
#: ``validate`` found samples or files that are not what the index says.
EXIT_DATA_PROBLEMS = 1
#: The command line is wrong (argparse's own code).
EXIT_USAGE = 2
#: shardstream could not do what was asked: the message names the object and the fix.
EXIT_FAILED = 3
EXIT_INTERRUPTED = 130
#: The reader of the output went away (``shardstream inspect DS --json | head``): 128 + SIGPIPE,
#: as a shell reports a tool that SIGPIPE ended.
EXIT_BROKEN_PIPE = 141

_EPILOG = """\
exit codes: 0 success; 1 validate found problems; 2 wrong command line; 3 the command failed
(the message says what and what to do); 130 interrupted; 141 the output's reader closed it
(e.g. | head).
"""

# Library messages name Python arguments; on the command line the user has flags.
_CLI_TERMS = (
    (re.compile(r"exist_ok=True(?: in mds_kwargs)?"), "--exist-ok"),
    (re.compile(r"on_null='skip'"), "--skip-nulls"),
    (re.compile(r", drop or rewrite such rows in udf_iterable"), ""),
    (re.compile(r"Fill it first \(DataFrame\.fillna [^)]*\)"), "Fill it in the source first"),
    (re.compile(r"\(retry=(\d+), timeout=([^ ]+) s\)"), r"(--retry \1, --timeout \2)"),
    (re.compile(r"DownloadOptions\.timeout or retry"), "--timeout or --retry"),
    (re.compile(r"DownloadOptions\.retry"), "--retry"),
    (re.compile(r"\bsplit='([^']*)'"), r"--split \1"),
    (re.compile(r"\bsplit="), "--split"),
)


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose refusal of a command line is one line on stderr (exit 2).

    Its sub-commands' parsers are of this class too (argparse makes them of the parent's).
    """

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every sub-command."""
    parser = _Parser(
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
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
    except BrokenPipeError:
        # Python's recipe: later writes (the exit's flush) go nowhere, so no second error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except ShardstreamError as exc:
        print(f"shardstream {args.command}: {cli_terms(str(exc))}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"shardstream {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return code


def cli_terms(message: str) -> str:
    """A library message with its Python arguments named as the command line's flags.

    Example:
        cli_terms("pass on_null='skip' to drop them")  # "pass --skip-nulls to drop them"
    """
    for pattern, flag in _CLI_TERMS:
        message = pattern.sub(flag, message)
    return message
