"""Run the tolerance-heavy test files (``tiers.SEED_SENSITIVE``) at several fresh random seeds:
``python -m tests.seeds [--count N | --seed S ...] [--workers W] [-- PYTEST_ARGS ...]`` (``make test-seeds``).

CI runs the suite at one fixed ``TEST_SEED`` (``.ci/run``), so its result depends only on the code; the inputs of
every other run are fresh draws. Run this before changing a tolerance or a kernel's numerics: a test that fails at
some seed is a bug in the test or the code (a bound set below the rounding it must allow, or an error the code should
not make), to be understood and fixed, never rerun until it passes. Each seed is one pytest run; the table at the end
names each seed's failures and the command that replays them."""

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.tiers import SEED_SENSITIVE

ROOT = Path(__file__).resolve().parents[1]


def failures(junit: Path) -> list[str]:
    """Node ids of the failed or errored tests in a pytest JUnit XML report."""
    found = []
    for case in ET.parse(junit).iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            path = case.get("classname", "").replace(".", "/") + ".py"
            found.append(f"{path}::{case.get('name')}")
    return found


def run_seed(seed: int, workers: int, pytest_args: list[str]) -> tuple[int, list[str]]:
    """(pytest's exit code, failed node ids) of the tolerance-heavy files at ``seed``."""
    with tempfile.TemporaryDirectory() as folder:
        junit = Path(folder) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-n", str(workers), "--dist", "loadfile"]
        command += [f"--junitxml={junit}", *SEED_SENSITIVE, *pytest_args]
        env = {**os.environ, "TEST_SEED": str(seed)}
        code = subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
        return code, failures(junit) if junit.exists() else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.seeds", description=__doc__)
    parser.add_argument("--count", type=int, default=3, help="fresh seeds to run (default 3)")
    parser.add_argument("--seed", type=int, action="append", help="run this seed instead (repeatable): a replay")
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist processes (default 2)")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest (e.g. -k ssd)")
    args = parser.parse_args(argv)
    if args.count < 1 or args.workers < 1:
        parser.error(f"--count and --workers must be at least 1, got {args.count} and {args.workers}")
    seeds = args.seed or [secrets.randbelow(2**31) for _ in range(args.count)]
    results = []
    for seed in seeds:
        print(f"\n=== TEST_SEED={seed}", flush=True)
        results.append((seed, *run_seed(seed, args.workers, args.pytest_args)))
    print("\n| TEST_SEED | result | failed |\n|---|---|---|")
    for seed, code, failed in results:
        result = "passed" if code == 0 else f"exit {code}"
        print(f"| {seed} | {result} | {', '.join(failed) or '-'} |")
    for seed, _, failed in results:
        if failed:
            print(f"replay: TEST_SEED={seed} {sys.executable} -m pytest {' '.join(failed)}")
    return 0 if all(code == 0 for _, code, _ in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
