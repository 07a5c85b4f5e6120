"""The final tree's layering, read from the source: one op registry below the engine, tracing
above it.

- No engine package imports minisgl.trace: the trace installs its hook in the registry
  (minisgl.ops.hook) from above, as LLM does; importing the engine loads nothing of it.
- Layers and models choose no implementation: they call ops by name and import no kernel
  module, so `triton_for`, `one_token_kernels` and `extension_for` appear nowhere in them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "python" / "minisgl"
ENGINE_PACKAGES = ("kernel", "layers", "engine", "attention", "moe", "models", "kvcache",
                   "scheduler", "ops")


def sources(*packages: str) -> list[Path]:
    found = [p for name in packages for p in sorted((PACKAGE / name).rglob("*.py"))]
    assert found, packages
    return found


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in the file, relative ones resolved."""
    package = ["minisgl", *path.relative_to(PACKAGE).parent.parts]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.append((node.lineno, module))
            # `from minisgl import trace` names the package in the alias, not in the module
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def test_the_scan_resolves_relative_imports():
    """It sees an import written either way: trace/session.py's relative import of its runtime,
    the registry's of its hook, a layer's absolute import of the registry."""
    def modules(*parts: str) -> set[str]:
        return {m for _, m in imported_modules(PACKAGE.joinpath(*parts))}

    assert "minisgl.trace.runtime" in modules("trace", "session.py")
    assert "minisgl.ops.hook" in modules("ops", "registry.py")
    assert {"minisgl.ops", "minisgl.layers.base"} <= modules("layers", "norm.py")


@pytest.mark.parametrize("package", ENGINE_PACKAGES)
def test_no_engine_package_imports_trace(package):
    offending = [f"{path.relative_to(PACKAGE)}:{line} imports {module}"
                 for path in sources(package) for line, module in imported_modules(path)
                 if module == "minisgl.trace" or module.startswith("minisgl.trace.")]
    assert not offending, offending


def test_importing_the_engine_loads_nothing_of_trace():
    code = ("import sys, minisgl.scheduler, minisgl.engine.engine, minisgl.engine.graph, "
            "minisgl.models.register; "
            "print(sorted(m for m in sys.modules if m.startswith('minisgl.trace')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.strip() == "[]"


def test_layers_and_models_choose_no_implementation():
    for path in sources("layers", "models"):
        text = path.read_text(encoding="utf-8")
        for name in ("triton_for", "one_token_kernels", "extension_for"):
            assert name not in text, f"{path.relative_to(PACKAGE)} mentions {name}"
        kernels = [m for _, m in imported_modules(path)
                   if m == "minisgl.kernel" or m.startswith("minisgl.kernel.")]
        assert not kernels, f"{path.relative_to(PACKAGE)} imports {kernels}"
