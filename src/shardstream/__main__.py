"""``python -m shardstream``: the ``shardstream`` command."""

from shardstream.cli.main import main

__all__: list[str] = []

if __name__ == "__main__":
    raise SystemExit(main())
