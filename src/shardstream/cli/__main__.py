"""``python -m shardstream.cli``."""

from shardstream.cli.main import main

raise SystemExit(main())
