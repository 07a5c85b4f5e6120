"""The final tree's layering, read from the source: one op registry below the engine, tracing
above it.

- Every package stands on a floor and imports only from the floors below it (FLOORS), so no
  import runs back up: the MoE maths (moe/) and the kernels sit below the op registry, which sits
  below the layers; utils/ knows no message (the ZeroMQ queues that speak the codec live in
  message/); distributed/ loads no model. One import is let through, and says why (UPWARD).
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
                   "scheduler", "ops", "speculative", "grammar", "quant")

# minisgl's packages and top-level modules, from the ground floor up. A package imports only from
# floors below its own; a new package gets its floor here.
FLOORS = (
    ("env", "core", "distributed"),  # settings, the engine's data types, the TP process group
    ("utils",),  # helpers, the offline models, the private ipc folder and worker set-up
    ("moe", "message"),  # the MoE maths in torch; the messages, their codec and ZeroMQ queues
    ("kernel",),  # torch_ops, the CUDA extension, the Triton kernels
    ("ops",),  # the op registry: each op's reference and its faster implementations
    ("layers", "kvcache"),
    ("quant",),  # which layers are stored in 8 bits, quantized after loading (chapter 26)
    ("models", "attention"),
    ("engine", "tokenizer", "trace", "shell"),
    # guesses and their verification, on the engine (chapter 24); grammars that constrain the
    # sampled tokens (chapter 25)
    ("speculative", "grammar"),
    ("scheduler",),
    ("llm", "server"),
    ("benchmark", "__main__"),
)
# The imports that run up a floor, each with its reason.
UPWARD = {
    # RopeScaling is part of the typed config.json of chapter 1 (models/config.py, written before
    # there are layers); the rotary layer takes it as it is.
    ("layers/rotary.py", "minisgl.models.config"),
}


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


def floor_of(name: str) -> int | None:
    return next((i for i, names in enumerate(FLOORS) if name in names), None)


def test_every_package_has_a_floor():
    names = {p.name.removesuffix(".py") for p in PACKAGE.iterdir()
             if p.name != "__init__.py" and (p.suffix == ".py" or (p / "__init__.py").is_file())}
    assert names == {name for floor in FLOORS for name in floor}


@pytest.mark.parametrize("name", [name for floor in FLOORS for name in floor])
def test_no_import_runs_up_a_floor(name):
    files = sources(name) if (PACKAGE / name).is_dir() else [PACKAGE / f"{name}.py"]
    upward = []
    for path in files:
        where = path.relative_to(PACKAGE).as_posix()
        for line, module in imported_modules(path):
            parts = module.split(".")
            if parts[0] != "minisgl" or len(parts) < 2 or parts[1] == name:
                continue
            floor = floor_of(parts[1])
            let_through = any(w == where and (module == m or module.startswith(m + "."))
                              for w, m in UPWARD)
            said = any(u.startswith(f"{where}:{line} ") for u in upward)  # `from m import a`
            if floor is not None and floor >= floor_of(name) and not let_through and not said:
                upward.append(f"{where}:{line} imports {module} (floor {floor})")
    assert not upward, f"{name} stands on floor {floor_of(name)}: {upward}"


def test_the_floors_catch_the_imports_that_ran_back_up(tmp_path, monkeypatch):
    """What issue 30 moved would fail here: each line, put back in its old file, runs up."""
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path)
    old = {"moe/layer.py": "from minisgl.layers import BaseOP\n",
           "kernel/bench.py": "def f():\n    from minisgl import ops\n",
           "utils/mp.py": "from minisgl.message import decode, encode\n",
           "ops/sampling.py": "from minisgl.engine.sample import top_k_top_p_filter\n",
           "distributed/local.py": "def f():\n    from minisgl.models.weight import load_model\n"}
    for where, text in old.items():
        (tmp_path / where).parent.mkdir(exist_ok=True)
        (tmp_path / where).write_text(text)
        with pytest.raises(AssertionError, match="imports minisgl"):
            test_no_import_runs_up_a_floor(where.split("/")[0])


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
