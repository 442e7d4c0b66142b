"""``python -m compare.parity``: the group's command, ``compare.parity.check``."""

from compare.parity.check import main

raise SystemExit(main())
