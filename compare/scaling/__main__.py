"""``python -m compare.scaling``: the group's command, ``compare.scaling.sweep``."""

from compare.scaling.sweep import main

raise SystemExit(main())
