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


def test_a_port_named_like_a_generated_function_keeps_the_function_reachable():
    """Before: a port named 'causal_same_document_mask' passed validate and codegen, then the generated forward raised
    TypeError: the parameter of that name shadowed the mask factory of the same name (issue 47, round three)."""
    import torch

    import tensorcad
    from tensorcad.runtime.building.generated import build

    port = "causal_same_document_mask"
    raw = tensorcad.load("nano-sort").to_dict()
    raw["nodes"][1]["in"] = {"x": "embed", port: "documents"}
    raw["nodes"][1]["params"]["block"]["params"]["attention"]["mask"] = f"{port}(b, q) == {port}(b, kv)"
    model = build(tensorcad.load(raw), form="eager")
    ids, documents = torch.randint(0, 16, (1, 12)), torch.tensor([[0] * 5 + [1] * 7])
    packed = model(ids, documents=documents)
    alone = model(ids[:, 5:], documents=torch.zeros(1, 7, dtype=torch.long))
    assert torch.allclose(packed[:, 5:], alone, atol=1e-5)  # it runs, and keeps the documents apart
