"""The ``shardstream`` command: convert, inspect, validate, merge, head, bench and simulate.

Run ``shardstream --help`` (or ``python -m shardstream.cli``). Exit codes: 0 success, 1 the
data has problems (``validate`` found some), 2 the command line is wrong, 3 shardstream could
not do what was asked (a missing file, bad input, a refused credential: the message says which
and what to do), 130 interrupted, 141 the output's reader closed it early (``| head``).
"""

from shardstream.cli.main import main

__all__ = ["main"]
