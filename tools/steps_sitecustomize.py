"""Runs first in every Python process of a chapter's check (copied in as sitecustomize.py).

tools/steps_child.py puts this file, as `sitecustomize.py`, on the PYTHONPATH of the chapter's
main and tests. It hides the real repository and any editable install of it, and refuses to import
minisgl from anywhere but the chapter tree. While a chapter's tests run (MINISGL_STEPS_RECORD set),
it also records which files of the tree they read: see _note. It reads its settings from the
environment that steps_child.child_env() builds, so it is never imported from here.
"""

import atexit
import os
import sys

_TREE = os.path.realpath(os.environ["MINISGL_STEPS_TREE"])
_TREES = {_TREE, os.path.abspath(os.environ["MINISGL_STEPS_TREE"])}
_RECORD = os.environ.get("MINISGL_STEPS_RECORD")
_noted = set()
_HIDE = [os.path.realpath(p) for p in os.environ["MINISGL_STEPS_HIDE"].split(os.pathsep) if p]
# The interpreter's own environment is never the engine's code, even when it lies inside the
# repository (the README creates `.venv/` in the repository's root): its packages stay visible.
_ENV = {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)}


def _inside(path, folder):
    path = os.path.realpath(path or os.getcwd())
    return path == folder or path.startswith(folder + os.sep)


def _foreign(path):
    if any(_inside(path, env) for env in _ENV):
        return False
    return not _inside(path, _TREE) and any(_inside(path, h) for h in _HIDE)


def _editable(obj):
    return "__editable__" in getattr(obj, "__module__", "") + repr(obj)


sys.meta_path[:] = [f for f in sys.meta_path if not _editable(f)]
sys.path_hooks[:] = [h for h in sys.path_hooks if not _editable(h)]
sys.path[:] = [p for p in sys.path if not _foreign(p)]
sys.path_importer_cache.clear()


class _OnlyFromTree:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "minisgl" and not name.startswith("minisgl."):
            return None
        for finder in sys.meta_path:
            if finder is cls or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            _note_missing(name, path)
            return None
        places = [spec.origin] if spec.origin else list(spec.submodule_search_locations or [])
        for place in places:
            if place in ("built-in", "frozen") or not _inside(place, _TREE):
                raise ImportError(
                    f"steps.py isolation: {name} would come from {place}, outside {_TREE}"
                )
        return spec


sys.meta_path.insert(0, _OnlyFromTree)


# One line per file of the tree, relative to it, written at once with O_APPEND: lines from
# concurrent processes never mix, and a worker that ends by os._exit or a signal has still
# recorded what it read.
def _write(line):
    if line not in _noted:
        _noted.add(line)
        fd = os.open(_RECORD, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, os.fsencode(line) + b"\n")
        finally:
            os.close(fd)


# Installed packages live under a folder of one of these names; the first part of a path below
# it is the package's top-level name (torch/..., six.py, _cffi_backend.cpython-311-...so).
_SITE = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


def _note_package(path):
    # "+torch": the record keeps that distribution's version (steps_proof.packages_loaded).
    # Metadata folders are not loading: pytest reads every distribution's entry points. True
    # for any path inside an installed-packages folder (a .venv/ in the repository included).
    for site in _SITE:
        at = path.rfind(site)
        if at >= 0:
            top = path[at + len(site):].split(os.sep, 1)[0]
            if top and not top.endswith((".dist-info", ".egg-info", ".pth", ".egg-link")):
                _write("+" + top.split(".", 1)[0])
            return True
    return False


def _note(path, folder=False):
    if not _RECORD:
        return
    path = os.path.abspath(path)
    if os.sep + "__pycache__" in path or os.sep + ".hypothesis" in path:
        return  # caches that tests write (bytecode, hypothesis' examples), not code
    if _note_package(path):
        return
    for tree in _TREES:
        if path == tree or path.startswith(tree + os.sep):
            relative = path[len(tree) + 1 :]
            if folder:
                relative = "/" + relative  # a folder listed: its own record, see used_folders
            _write(relative)
            return


def _note_missing(name, path):
    # A minisgl module this tree lacks: where the final tree may have it, so that a test that
    # behaves differently once it exists (importorskip, find_spec) is not taken as proven.
    tail = name.rpartition(".")[2]
    for folder in path or sys.path:
        _note(os.path.join(folder, tail + ".py"))
        _note(os.path.join(folder, tail, "__init__.py"))


def _note_started(argv, cwd):
    # A program started with a file of the tree as an argument may read it, and its neighbours,
    # where no hook of ours runs (`python -I` ignores sitecustomize; a compiler, a shell): every
    # file of that folder counts as read.
    for arg in argv if isinstance(argv, (list, tuple)) else [argv]:
        if not isinstance(arg, (str, bytes, os.PathLike)):
            continue
        path = os.path.join(os.fsdecode(cwd) if cwd else os.getcwd(), os.fsdecode(arg))
        if os.path.isfile(path) and any(_inside(path, t) for t in _TREES):
            folder = os.path.dirname(os.path.abspath(path))
            _note(folder, folder=True)
            for name in os.listdir(folder):
                if os.path.isfile(os.path.join(folder, name)):
                    _note(os.path.join(folder, name))


def _note_reads(event, args):
    # Every file opened for reading: imported sources (io.open_code) and data files alike; and
    # every folder listed (the import system lists each package folder, glob and os.walk scan):
    # a file added to a listed folder can change what the run does.
    if event in ("os.listdir", "os.scandir") and not isinstance(args[0], int):
        _note(os.fsdecode(args[0] if args[0] is not None else "."), folder=True)
        return
    if event == "subprocess.Popen":
        _note_started(args[1], args[2])
        return
    if event in ("os.exec", "os.posix_spawn"):
        _note_started(args[1], None)
        return
    if event != "open" or args[0] is None or isinstance(args[0], int):
        return
    if args[2] & os.O_ACCMODE != os.O_RDONLY:
        return  # written, not read: a file the test makes is no input
    _note(os.fsdecode(args[0]))  # a record that cannot be written fails the test's open()


def _note_modules():
    # Extension modules load without an `open` event; every module's file is in sys.modules.
    for module in list(sys.modules.values()):
        # through __dict__: a lazy module's __getattr__ would import or raise
        file = (getattr(module, "__dict__", None) or {}).get("__file__")
        if isinstance(file, str):
            _note(file)


if _RECORD:
    sys.addaudithook(_note_reads)
    atexit.register(_note_modules)
