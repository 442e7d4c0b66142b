"""``python -m compare.kernels``: the group's command, ``compare.kernels.bench``."""

from compare.kernels.bench import main

raise SystemExit(main())
