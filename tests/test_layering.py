"""The top-level packages are the architecture: every import (at module level or inside a function) runs down the
layers. pallas_kernels knows nothing of Flax, torch or the packages above it; jax_mamba imports neither
torch_reference nor compare, and torch never at module level (only the functions that read or write torch files:
mamba-ssm and NVlabs checkpoints, saved PyG datasets); torch_reference never imports compare. Inside jax_mamba,
checkpoints (run folders, the store, conversion) is used by train and generate and uses neither, and generate does
not import train."""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def imports(package: str) -> list[tuple[str, str, bool]]:
    """(module file relative to the root, imported module, whether at module level) for every import."""
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found += [(str(path.relative_to(ROOT)), name, id(node) in top) for name in names]
    return found


def offending(package: str, forbidden: tuple[str, ...], where=lambda file, top: True) -> list[str]:
    return [
        f"{file} imports {name}"
        for file, name, top in imports(package)
        if name.split(".")[0] in forbidden or any(name.startswith(f + ".") or name == f for f in forbidden)
        if where(file, top)
    ]


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("pallas_kernels", ("flax", "torch", "jax_mamba", "torch_reference", "compare")),
        ("jax_mamba", ("torch_reference", "compare")),
        ("torch_reference", ("compare",)),
        ("jax_mamba/checkpoints", ("jax_mamba.train", "jax_mamba.generate")),
        ("jax_mamba/generate", ("jax_mamba.train",)),
    ],
)
def test_no_import_runs_up_the_layers(package, forbidden):
    assert offending(package, forbidden) == []


def test_jax_mamba_imports_torch_only_where_it_reads_or_writes_torch_files():
    assert offending("jax_mamba", ("torch", "torch_geometric"), where=lambda file, top: top) == []


def test_the_check_sees_an_upward_import(tmp_path, monkeypatch):
    """The scan itself: an import inside a function of a package module is found (a test that cannot fail is none)."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "mod.py").write_text("import os\n\ndef f():\n    from compare.kernels import main\n    return main\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert offending("pkg", ("compare",)) == ["pkg/mod.py imports compare.kernels"]
