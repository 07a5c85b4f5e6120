"""`steps.py check` with a virtual environment inside the repository, as the README sets it up.

The check hides the real repository from the chapter's processes so that nothing of the final
engine leaks into an earlier chapter's tree. A `.venv/` in the repository's root is not the
engine's code, though: its packages (torch, pytest, ...) must stay importable.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from test_steps import PKG, STEPS, make_repo, src


def venv_in(root: Path) -> Path:
    """A virtual environment at root/.venv that sees this interpreter's packages (pytest) and
    holds one module of its own."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages",
                    str(root / ".venv")], check=True, timeout=120)
    python = root / ".venv" / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"], capture_output=True,
                             text=True, check=True, timeout=60).stdout.strip()
    assert Path(purelib).resolve().is_relative_to(root.resolve())
    (Path(purelib) / "only_in_the_venv.py").write_text("VALUE = 7\n", encoding="utf-8")
    return python


def test_a_virtual_environment_inside_the_repository_stays_importable(tmp_path):
    files = {
        PKG + "__init__.py": "",
        "examples/ch01.py": src("import only_in_the_venv", "print(only_in_the_venv.VALUE)"),
        "tests/test_ch01.py": src(
            "import only_in_the_venv",
            "",
            "def test_the_venv_module():",
            "    assert only_in_the_venv.VALUE == 7",
        ),
    }
    root = make_repo(tmp_path / "repo", [{"number": 1, "files": [PKG + "__init__.py"],
                                          "tests": ["tests/test_ch01.py"]}], files)
    python = venv_in(root)
    result = subprocess.run([str(python), str(STEPS), "--root", str(root), "check", "1"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1/1 chapters passed" in result.stdout
