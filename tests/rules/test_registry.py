"""The rule registry: ids, severities and doc lines; `tensorcad rules` on the CLI."""

import json
import subprocess
import sys

from tensorcad.rules import RULES, check

EXPECTED = {"input-roles", "ROPE-02", "packing-unused", "document-blocks"}


def test_the_registry_holds_the_rules_with_docs():
    assert EXPECTED <= set(RULES)
    for r in RULES.values():
        assert r.severity in ("error", "warn", "note") and r.doc


def test_every_preset_is_clean_at_its_own_context():
    from tensorcad.design import preset_names

    for name in preset_names():
        assert [d for d in check(name) if d.severity != "note"] == [], name


def test_cli_rules_json_and_exit_codes():
    run = subprocess.run([sys.executable, "-m", "tensorcad.cli", "rules", "llama-3-8b", "--pack", "1024", "--json"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout)
    assert [d["rule"] for d in found] == ["packing-unused"]
    assert set(found[0]) == {"rule", "severity", "message", "path"}
