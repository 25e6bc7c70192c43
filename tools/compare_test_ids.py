"""The same tests pass before and after a change, modulo moved paths: `python tools/compare_test_ids.py BEFORE [AFTER]`.

    python tools/compare_test_ids.py 46f2111               # BEFORE against the working tree's HEAD
    python tools/compare_test_ids.py 46f2111 HEAD --json
    python tools/compare_test_ids.py --xml before.xml after.xml --renames 46f2111..HEAD

For each revision it checks the revision out in a scratch git worktree and runs the README's test command
there (``python -m pytest -n 2 --dist worksteal -rs``, which imports the worktree's own packages before the
installed ones) with ``--junitxml``; or it reads two JUnit files already written. A test file that git
sees renamed between the two revisions (``git diff -M``) is read under its new path, and a module path in
a test's parameters under the path ``tensorcad.faces.MOVED`` gives it now, so a test that only moved is the
same test. Prints what passed before and does not pass after (missing, failed or skipped),
what is new, and the counts; exits 1 when a test that passed before does not pass after.

Written for the rooms of issue 41 (certification, context parallelism and the hybrids moved into
packages, their tests beside them); any later reorganisation can rerun it.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND = [sys.executable, "-m", "pytest", "-n", "2", "--dist", "worksteal", "-rs", "-q", "-p", "no:cacheprovider"]


def outcomes(junit: Path) -> dict[str, str]:
    """Each test id (its file's dotted path, then the test's name) and its outcome."""
    result: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        children = {child.tag for child in case}
        outcome = ("failed" if children & {"failure", "error"} else "skipped" if "skipped" in children
                   else "passed")
        # xdist may report a test twice (a setup error after a pass): the worse outcome stands
        if result.get(test_id) not in ("failed",):
            result[test_id] = outcome
    return result


def renames(span: str) -> dict[str, str]:
    """Old dotted test-module path -> new, for every test file git sees renamed in `span`."""
    before, _, after = span.partition("..")
    out = subprocess.run(["git", "diff", "-M", "--name-status", "--diff-filter=R", before, after or "HEAD",
                          "--", "tests"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    moved = {}
    for line in out.splitlines():
        _, old, new = line.split("\t")
        if old.endswith(".py") and new.endswith(".py"):
            moved[old[:-3].replace("/", ".")] = new[:-3].replace("/", ".")
    return moved


def _moved_modules() -> dict[str, str]:
    sys.path.insert(0, str(ROOT))
    from tensorcad.faces import MOVED

    return MOVED


MODULE_PATH = re.compile(r"\btensorcad(?:\.\w+)+")


def _new_path(dotted: str, modules: dict[str, str]) -> str:
    """`dotted` (a module, or an attribute of one) under the path its module has now."""
    for old in sorted(modules, key=len, reverse=True):
        if dotted == old or dotted.startswith(old + "."):
            return modules[old] + dotted[len(old):]
    return dotted


def renamed(test_id: str, moved: dict[str, str], modules: dict[str, str] | None = None,
            after: dict[str, str] | None = None) -> str:
    module, sep, rest = test_id.partition("::")
    # the classname is the module's dotted path, with a class name after it for a test in a class
    for old, new in moved.items():
        if module == old or module.startswith(old + "."):
            module = new + module[len(old):]
            break
    if after is not None and module + sep + rest in after:
        return module + sep + rest  # a face's name that still reads as it did (`tensorcad.closed_form`)
    # a test parametrised by a module's path (the docs' names) is the same test under the new path
    rest = MODULE_PATH.sub(lambda m: _new_path(m.group(0), modules or {}), rest)
    return module + sep + rest


def compare(before: dict[str, str], after: dict[str, str], moved: dict[str, str],
            modules: dict[str, str] | None = None) -> dict:
    before = {renamed(test_id, moved, modules, after): outcome for test_id, outcome in before.items()}
    lost = sorted(t for t, o in before.items() if o == "passed" and after.get(t) != "passed")
    return {
        "before": _counts(before), "after": _counts(after), "moved_files": len(moved),
        "passed_before_not_after": [{"test": t, "after": after.get(t, "missing")} for t in lost],
        "new": sorted(set(after) - set(before)),
        "gone": sorted(set(before) - set(after)),
        "same_passing": len([t for t, o in before.items() if o == "passed" and after.get(t) == "passed"]),
    }


def _counts(results: dict[str, str]) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for outcome in results.values():
        counts[outcome] += 1
    return counts


def run_at(revision: str, junit: Path) -> None:
    """The README's test command at `revision`, in a scratch worktree, writing `junit`."""
    with tempfile.TemporaryDirectory(prefix="tensorcad-ids-") as scratch:
        tree = Path(scratch) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), revision], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            print(f"running the suite at {revision} ...", file=sys.stderr, flush=True)
            subprocess.run([*COMMAND, f"--junitxml={junit}"], cwd=tree, stdout=subprocess.DEVNULL)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("revisions", nargs="*", help="BEFORE [AFTER] (AFTER defaults to HEAD)")
    parser.add_argument("--xml", nargs=2, metavar=("BEFORE_XML", "AFTER_XML"), help="two JUnit files already written")
    parser.add_argument("--renames", metavar="BEFORE..AFTER", help="the revisions the files moved between (with --xml)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.xml:
        if not args.renames:
            parser.error("--xml needs --renames BEFORE..AFTER")
        before_xml, after_xml = map(Path, args.xml)
        span = args.renames
    elif args.revisions:
        before_rev, after_rev = (args.revisions + ["HEAD"])[:2]
        scratch = Path(tempfile.mkdtemp(prefix="tensorcad-junit-"))
        before_xml, after_xml = scratch / "before.xml", scratch / "after.xml"
        run_at(before_rev, before_xml)
        run_at(after_rev, after_xml)
        span = f"{before_rev}..{after_rev}"
    else:
        parser.error("give BEFORE [AFTER], or --xml BEFORE_XML AFTER_XML --renames BEFORE..AFTER")
    result = compare(outcomes(before_xml), outcomes(after_xml), renames(span), _moved_modules())
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        b, a = result["before"], result["after"]
        print(f"before: {b['passed']} passed, {b['failed']} failed, {b['skipped']} skipped")
        print(f"after:  {a['passed']} passed, {a['failed']} failed, {a['skipped']} skipped")
        print(f"test files moved: {result['moved_files']}; passing both times: {result['same_passing']}")
        for row in result["passed_before_not_after"]:
            print(f"passed before, {row['after']} after: {row['test']}")
        for test in result["gone"]:
            print(f"gone: {test}")
        for test in result["new"]:
            print(f"new: {test}")
    return 1 if result["passed_before_not_after"] else 0


if __name__ == "__main__":
    sys.exit(main())
