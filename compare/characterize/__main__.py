"""``python -m compare.characterize``: the group's command, ``compare.characterize.report``."""

from compare.characterize.report import main

raise SystemExit(main())
