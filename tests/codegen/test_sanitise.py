"""Sanitised identifiers: the only way design text reaches generated code."""

from __future__ import annotations

import keyword
import re

from hypothesis import given, strategies as st

from tensorcad.codegen.names import Namer, class_name, comment_text, identifier, title_text

IDENT = re.compile(r"[a-z_][a-z0-9_]*\Z")
HOSTILE = ['x"); import os; os.system("echo pwned', "__import__", "a\nb", "é-ß", "class",
           "3d", "ids", "self", "'''", '"""', "\\", "forward", "training", "", "____"]


@given(st.text(max_size=80))
def test_any_text_becomes_a_plain_identifier(text):
    name = identifier(text)
    assert IDENT.match(name) and name.isidentifier()
    assert not keyword.iskeyword(name) and not name.startswith("_")


@given(st.text(max_size=80))
def test_comment_and_title_text_cannot_close_a_string_or_a_line(text):
    for safe in (comment_text(text), title_text(text)):
        assert not set(safe) & set("\"'\\\n\r#") and safe.isascii() and safe


def test_hostile_names_are_defused():
    for text in HOSTILE:
        name = identifier(text)
        assert IDENT.match(name), (text, name)
        assert class_name(text).isidentifier()
    assert identifier("class") == "class_" and identifier("__import__") == "import_"
    assert identifier("forward") == "forward_"  # nn.Module's own attribute


def test_namer_is_unique_and_deterministic():
    keys = ["a-b", "a b", "a_b", "A B", "ids"]
    first, second = Namer({"ids"}), Namer({"ids"})
    names = [first(k) for k in keys]
    assert names == [second(k) for k in keys]
    assert len(set(names)) == len(names)
    assert names[:3] == ["a_b", "a_b_2", "a_b_3"] and "ids" not in names
    assert first("a-b") == "a_b"  # the same key, the same name
