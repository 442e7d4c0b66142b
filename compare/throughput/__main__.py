"""``python -m compare.throughput``: the group's command, ``compare.throughput.steps``."""

from compare.throughput.steps import main

raise SystemExit(main())
