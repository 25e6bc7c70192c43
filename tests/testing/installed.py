"""The wheel of this checkout, built once a session, and fresh environments that install it (issues 48 and 49).

Every other test runs from the editable install of the checkout; these hold what users install:
`pip wheel .`, installed into a virtual environment made here, run from a folder outside the checkout.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints.txt"


def build_wheel(out: Path) -> Path:
    """`pip wheel --no-deps` of the checkout's files (tracked, or new and not ignored) copied into `out`: the
    file users install, built from what the repository holds (a stale build/ folder in the checkout would
    otherwise put modules that no longer exist into the wheel)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.splitlines()
    source = out / "source"
    for name in listed:
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)],
                   check=True, capture_output=True, text=True, timeout=300)
    [wheel] = out.glob("tensorcad-*.whl")
    return wheel


def make_env(where: Path, *requirements: str, system_site_packages: bool = False) -> Path:
    """A virtual environment at `where` holding `requirements` (pinned by constraints.txt); its python."""
    venv.EnvBuilder(with_pip=True, system_site_packages=system_site_packages, clear=True).create(where)
    python = where / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c", str(CONSTRAINTS),
                    *requirements], check=True, capture_output=True, text=True, timeout=600)
    return python


def run(python: Path, *args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    # The checkout is on nobody's path here: PYTHONPATH cleared, the folder outside the checkout.
    env = {"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
