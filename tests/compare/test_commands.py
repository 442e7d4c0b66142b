"""Every ``python -m compare...`` command that README, docs/, tools/, benchmarks/ and reports/ write down names a
module that runs as a command: a module with ``main`` run under ``__main__``, or a group package whose
``__main__.py`` runs one. (The commands' own tests check what they do; this checks that none is left dangling.)"""

import ast
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
COMMAND = re.compile(r"python3? -m (compare(?:\.\w+)+)")


def documented_commands() -> dict[str, str]:
    """{module: a file that names it} over the written-down commands."""
    found = {}
    pages = [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("tools/*"), *ROOT.glob("benchmarks/**/*.md")]
    for page in [*pages, *ROOT.glob("reports/**/*.md")]:
        if page.is_file():
            for module in COMMAND.findall(page.read_text(errors="replace")):
                found.setdefault(module, str(page.relative_to(ROOT)))
    return found


def runs_main(path: Path) -> bool:
    """Whether the module at ``path`` calls ``main`` when run as ``__main__`` (or, a ``__main__.py``, at all)."""
    tree = ast.parse(path.read_text())
    calls = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    return "main" in calls


def test_every_documented_command_runs_a_main():
    commands = documented_commands()
    assert "compare.kernels" in commands and "compare.throughput" in commands  # the scan finds them
    dangling = []
    for module, page in sorted(commands.items()):
        spec = importlib.util.find_spec(module)
        if spec is None:
            dangling.append(f"{module} ({page}): no such module")
            continue
        path = Path(spec.origin)
        if path.name == "__init__.py":
            path = path.with_name("__main__.py")
        if not path.is_file() or not runs_main(path):
            dangling.append(f"{module} ({page}): does not run a main()")
    assert dangling == []
