"""``python -m compare.convergence``: the group's command, ``compare.convergence.curves``."""

from compare.convergence.curves import main

raise SystemExit(main())
