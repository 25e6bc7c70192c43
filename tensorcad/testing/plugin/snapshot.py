"""Goldens under syrupy: the extension writing each golden to `snapshots/<kind>/<design>.<ext>`.

What a golden holds, its text and its file name are the runtime's
(`tensorcad.runtime.certification.design.goldens`); this module only lets syrupy compare and, with
`pytest --snapshot-update`, rewrite them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tensorcad.runtime.certification import (  # noqa: F401 - the names the plugin and its tests read here
    GOLDEN_KINDS as KINDS,
    GOLDEN_VERSION as VERSION,
    file_name,
    golden_dir,
    golden_text,
)

_file_name = file_name  # the older private name


def golden_extension(root: str | Path, kind: str) -> type:
    """A syrupy extension writing `<root>/snapshots/<kind>/<name>.<ext>`."""
    # syrupy on first use, not at import: the plugin loads this module in every session, and a session
    # without syrupy (tensorcad installed without its pytest extra) must still run (issue 49).
    from .extras import require

    require("syrupy")
    from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

    directory = str(golden_dir(root, kind))

    class TensorcadGolden(SingleFileSnapshotExtension):
        _write_mode = WriteMode.TEXT
        file_extension = KINDS[kind]

        @classmethod
        def dirname(cls, *, test_location) -> str:
            return directory

        @classmethod
        def discovery_dirname(cls, *, test_location) -> str:
            return directory

        @classmethod
        def get_snapshot_name(cls, *, test_location, index=0) -> str:
            # The design's name, not the test's: one golden a design, whatever test checks it.
            return str(index) if isinstance(index, str) else f"{test_location.testname}.{index}"

    TensorcadGolden.__name__ = f"TensorcadGolden_{kind}"
    return TensorcadGolden


# What each golden file was compared with in this process: two different texts for one
# file would have --snapshot-update write one and the next run fail on the other.
_SEEN: dict[Path, str] = {}


def forget_goldens_seen() -> None:
    _SEEN.clear()


def assert_golden(snapshot, root: str | Path, kind: str, name: str, data: Any) -> None:
    """Compare (or, with --snapshot-update, write) one golden.

    A golden not yet written fails in one line saying how to write it, and two
    different goldens under one name in a run are refused rather than overwritten.
    """
    import pytest

    __tracebackhide__ = True
    text = golden_text(kind, name, data)
    path = golden_dir(root, kind) / f"{file_name(name)}.{KINDS[kind]}"
    if _SEEN.setdefault(path, text) != text:
        pytest.fail(f"two different {kind} goldens named {name!r} in one run ({path}): "
                    "the design or its operating point differs where the name does not; rename one", pytrace=False)
    if not snapshot.update_snapshots and not path.is_file():
        pytest.fail(f"no golden {path}: run pytest --snapshot-update to write it", pytrace=False)
    assert text == snapshot(extension_class=golden_extension(root, kind), name=file_name(name))
