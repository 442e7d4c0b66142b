"""Do both frameworks train alike: training curves from the same weights, their verdict, runs tried again, determinism.

``python -m compare.convergence`` trains both sides from the same weights over several seeds (``curves``) and
judges them (``verdict``, drawn by ``plot``); ``tries`` compares runs of one seed, ``determinism`` one gradient
computed again and again."""
