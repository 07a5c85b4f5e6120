"""The environment of the processes a check starts in a chapter tree (its main, its tests).

Each of them first runs tools/steps_sitecustomize.py, installed as `sitecustomize.py` in a folder
on their PYTHONPATH: it keeps minisgl to the chapter tree and, while tests run, records the files
of the tree they read (the input of the proof by record, tools/steps_proof.py).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

# The hook's source: check_chapter writes it into the tree's site folder as sitecustomize.py.
SITECUSTOMIZE = Path(__file__).with_name("steps_sitecustomize.py").read_text(encoding="utf-8")


def child_env(tree: Path, site_dir: Path, root: Path) -> dict[str, str]:
    """Our environment, with the tree's python/ and the hook's folder first on PYTHONPATH, and
    the hook's settings: the tree, and the folders to hide (the repository, an editable install
    of minisgl)."""
    hide = [str(root)]
    spec = importlib.util.find_spec("minisgl") if "minisgl" not in sys.modules else None
    origin = spec.origin if spec else getattr(sys.modules.get("minisgl"), "__file__", None)
    if origin:
        installed = Path(origin).resolve().parent.parent
        if installed.name not in ("site-packages", "dist-packages"):
            hide.append(str(installed))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree / "python"), str(site_dir)])
    env["MINISGL_STEPS_TREE"] = str(tree)
    env["MINISGL_STEPS_HIDE"] = os.pathsep.join(hide)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env
