"""Write requirements.lock: one version of every package the project's requirements bring.

    python tools/lock.py [--fresh]

pip resolves requirements.txt and practice/requirements.txt in an empty virtual environment
(`--dry-run --report`, nothing installed). Each package it names is pinned at the version
installed in this interpreter when there is one (a machine set up earlier keeps what it has),
else, or with --fresh, at the version pip chose. A second dry run with the new lock as
constraints checks that the pins resolve together before the file is written.

Why a lock: the record of passing runs (tools/steps_proof.py) holds the versions of the packages
each run loaded, so a machine whose versions differ runs everything again. With the lock, a
fresh virtual environment and a machine set up before hold the same versions.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
REQUIREMENTS = ["requirements.txt", "practice/requirements.txt"]
HEADER = """\
# Every package that `pip install -r requirements.txt -r practice/requirements.txt` brings, at one
# version each: tools/setup_env.py installs with `-c requirements.lock`, so a fresh virtual
# environment and a machine set up earlier hold the same versions, and a run proven by record
# (tools/steps_proof.py keeps the versions of the packages a run loaded) stays proven on a clean
# clone. Written by `python tools/lock.py`; edit that, not this.
"""


def resolve(python: Path, constraints: Path | None) -> dict[str, str]:
    """What pip would install into the empty environment of `python`: name -> version."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        command = [str(python), "-m", "pip", "install", "--dry-run", "--quiet", "--report",
                   str(report)]
        for requirements in REQUIREMENTS:
            command += ["-r", requirements]
        if constraints is not None:
            command += ["-c", str(constraints)]
        subprocess.run(command, cwd=ROOT, check=True)
        items = json.loads(report.read_text())["install"]
    return {normal(i["metadata"]["name"]): i["metadata"]["version"] for i in items}


def normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh", action="store_true",
                        help="pin what pip chooses today, not what this interpreter has")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = venv / "bin" / "python"
        print("resolving in an empty environment (pip --dry-run) ...", flush=True)
        chosen = resolve(python, None)
        chosen.pop("minisgl", None)
        pins = {name: (None if args.fresh else installed_version(name)) or version
                for name, version in sorted(chosen.items())}
        candidate = Path(tmp) / "requirements.lock"
        candidate.write_text(HEADER + "".join(f"{n}=={v}\n" for n, v in pins.items()))
        print(f"checking that the {len(pins)} pins resolve together ...", flush=True)
        resolve(python, candidate)
        LOCK.write_text(candidate.read_text())
    kept = sum(pins[n] != chosen[n] for n in pins)
    print(f"wrote {LOCK.name}: {len(pins)} packages ({kept} kept at this machine's version)")


if __name__ == "__main__":
    main()
