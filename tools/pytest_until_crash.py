"""Run a pytest selection on the GPU machine so that a test that kills the process (a CUDA error, a segfault) is
named and the rest still run: ``python tools/pytest_until_crash.py OUT_PREFIX PYTEST_ARGS...``.

Each round runs pytest verbosely into ``OUT_PREFIX.<round>.txt``; where the process dies, the test it was in (the
last one started, never finished) is deselected and the next round runs the rest, up to ``ROUNDS`` rounds. Prints
the crashed tests and each round's summary line."""

import os
import re
import subprocess
import sys

ROUNDS = 5


def main() -> int:
    prefix, args = sys.argv[1], sys.argv[2:]
    crashed: list[str] = []
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    for round_ in range(ROUNDS):
        path = f"{prefix}.{round_}.txt"
        deselect = [f"--deselect={n}" for n in crashed]
        with open(path, "w") as log:
            rc = subprocess.run(
                [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *args, *deselect],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            ).returncode
        text = open(path).read()
        summary = [line for line in text.splitlines() if re.match(r"=+ .*(passed|failed|error|skipped).* =+$", line)]
        print(f"round {round_}: exit {rc}; {summary[-1] if summary else 'no summary'}", flush=True)
        if rc in (0, 1, 5) or summary:
            break
        started = re.findall(r"^(\S+::\S+) ", text, flags=re.M)
        finished = set(re.findall(r"^(\S+::\S+) (?:PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)", text, flags=re.M))
        open_tests = [n for n in started if n not in finished]
        if not open_tests:
            print("died outside any test; last lines:\n" + "\n".join(text.splitlines()[-15:]))
            break
        crashed.append(open_tests[-1])
        print(f"crashed in {open_tests[-1]}; last lines:\n" + "\n".join(text.splitlines()[-8:]), flush=True)
    print("crashed tests:", crashed or "none")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
