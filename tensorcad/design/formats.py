"""JSON and YAML text to plain objects, strictly.

What a design file may hold is plain data, so both readers refuse what a
permissive parser would quietly accept:

- a key given twice in one object (both formats): refused naming its path,
  instead of the last one silently winning;
- YAML anchors and aliases: refused outright, which also makes a
  "billion laughs" file (nested aliases expanding to gigabytes) impossible;
- YAML 1.1's implicit types: scalars are read by the YAML 1.2 core schema,
  so ``yes``/``on`` stay strings, ``1:30`` stays a string (1.1 read it as 90),
  ``0755`` is the integer 755 and dates stay strings;
- explicit tags for anything but plain data (``!!python/object``): refused by
  the safe constructor.

Both readers walk the parsed tree iteratively (no recursion on hostile depth)
and bound what they accept: at most ``MAX_DEPTH`` levels of nesting and
integers of at most 4,300 digits (Python's own limit), each refused as one
``TensorcadError`` naming the file. Every JSON or YAML the project reads (a
design, a Hugging Face config, a lengths file) goes through these two.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import TensorcadError, join, shown

# Levels of nesting a file may hold: a design nests a few levels (composites in
# composites), a config or a histogram one or two; past this it is hostile, and a
# reader that recursed on it would die of RecursionError.
MAX_DEPTH = 64


class _Duplicated(dict):
    """An object in which ``key`` appeared more than once (JSON's hook cannot say where)."""

    duplicate: str = ""


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    seen: set[str] = set()
    marked = _Duplicated(out)
    for key, _ in pairs:
        if key in seen:
            marked.duplicate = key
            break
        seen.add(key)
    return marked


def _too_deep(where: str) -> TensorcadError:
    return TensorcadError(where, f"nests more than {MAX_DEPTH} levels deep")


def _find_duplicate(root: Any, where: str) -> None:
    stack: list[tuple[Any, str, int]] = [(root, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep(where)
        if isinstance(value, _Duplicated):
            raise TensorcadError(join(path, value.duplicate) if path or value.duplicate else where,
                                 f"key {shown(value.duplicate)} is given twice (a key may appear once)")
        if isinstance(value, dict):
            stack.extend((v, join(path, str(k)), depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, join(path, i), depth + 1) for i, v in enumerate(value))


def parse_json(text: str, where: str) -> Any:
    """JSON text to objects; a repeated key is refused naming its path, and so is nesting past MAX_DEPTH."""
    try:
        content = json.loads(text, object_pairs_hook=_pairs)
    except RecursionError:
        raise _too_deep(where) from None
    except json.JSONDecodeError as e:
        raise TensorcadError(where, f"is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    except ValueError as e:  # an integer of 5,000 digits: Python's int() limit, worded
        detail = f"an integer of more than {_DIGITS:,} digits" if "digits" in str(e) else str(e).splitlines()[0]
        raise TensorcadError(where, f"is not valid JSON: {detail}") from None
    _find_duplicate(content, where)
    return content


# -- YAML ------------------------------------------------------------------------------

# The YAML 1.2 core schema's implicit scalars (https://yaml.org/spec/1.2.2/#1032-tag-resolution).
_CORE = (
    ("tag:yaml.org,2002:null", r"~|null|Null|NULL|", list("~nN") + [""]),
    ("tag:yaml.org,2002:bool", r"true|True|TRUE|false|False|FALSE", list("tTfF")),
    ("tag:yaml.org,2002:int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", list("-+0123456789")),
    ("tag:yaml.org,2002:float",
     r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.nan|\.NaN|\.NAN",
     list("-+.0123456789")),
)


def _yaml_loader():
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    parser = yaml.cyaml.CParser if base is not yaml.SafeLoader else None

    class Resolver(yaml.resolver.BaseResolver):
        yaml_implicit_resolvers: dict = {}

    for tag, pattern, first in _CORE:
        Resolver.add_implicit_resolver(tag, re.compile(rf"^(?:{pattern})$"), first)

    class Constructor(yaml.constructor.SafeConstructor):
        def construct_yaml_int(self, node):
            text = self.construct_scalar(node)
            if text.startswith(("0o", "0x")):
                if len(text) > _DIGITS:
                    raise yaml.constructor.ConstructorError(None, None, f"an integer of {len(text):,} digits "
                                                            f"(at most {_DIGITS:,})", node.start_mark)
                return int(text[2:], 8 if text[1] == "o" else 16)
            if not re.fullmatch(r"[-+]?[0-9]+", text):
                raise yaml.constructor.ConstructorError(None, None, f"{shown(text)} is not an integer",
                                                        node.start_mark)
            if len(text) > _DIGITS:  # int() would raise a bare ValueError past Python's limit
                raise yaml.constructor.ConstructorError(None, None, f"an integer of {len(text):,} digits "
                                                        f"(at most {_DIGITS:,})", node.start_mark)
            return int(text, 10)

        def construct_yaml_float(self, node):
            text = self.construct_scalar(node).lower()
            if text.lstrip("+-") == ".inf":
                return float("-inf") if text.startswith("-") else float("inf")
            if text == ".nan":
                return float("nan")
            return float(text)

    Constructor.add_constructor("tag:yaml.org,2002:int", Constructor.construct_yaml_int)
    Constructor.add_constructor("tag:yaml.org,2002:float", Constructor.construct_yaml_float)

    class Composer(yaml.composer.Composer):
        def compose_node(self, parent, index):
            event = self.peek_event()
            if isinstance(event, yaml.events.AliasEvent) or getattr(event, "anchor", None) is not None:
                mark = event.start_mark
                raise TensorcadError("", f"YAML anchors and aliases are not allowed (line {mark.line + 1}, "
                                         f"column {mark.column + 1})")
            return super().compose_node(parent, index)

    if parser is not None:
        class Loader(Composer, parser, Constructor, Resolver):  # libyaml's events, our composition
            def __init__(self, stream):
                parser.__init__(self, stream)
                Composer.__init__(self)
                Constructor.__init__(self)
                Resolver.__init__(self)
    else:  # pragma: no cover - PyYAML without libyaml
        class Loader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, Composer, Constructor, Resolver):
            def __init__(self, stream):
                yaml.reader.Reader.__init__(self, stream)
                yaml.scanner.Scanner.__init__(self)
                yaml.parser.Parser.__init__(self)
                Composer.__init__(self)
                Constructor.__init__(self)
                Resolver.__init__(self)
    return Loader


_LOADER = None
_DIGITS = 4_300  # Python's default int_max_str_digits: JSON's reader stops at the same count


def _check_yaml_keys(root, where: str) -> None:
    """Refuse a mapping that repeats a key, naming its path (walking composed nodes)."""
    import yaml

    stack = [(root, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep(where)
        if isinstance(node, yaml.MappingNode):
            seen: set = set()
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else None
                if not isinstance(name, str):
                    raise TensorcadError(path or where, f"a key must be text, not a {type(key).__name__}")
                if name in seen:
                    raise TensorcadError(join(path, name), f"key {shown(name)} is given twice (a key may appear once)")
                seen.add(name)
                stack.append((value, join(path, name), depth + 1))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((v, join(path, i), depth + 1) for i, v in enumerate(node.value))


def parse_yaml(text: str, where: str) -> Any:
    """YAML text (one document) to objects, by the 1.2 core schema, with no anchors, aliases or repeats."""
    import yaml

    global _LOADER
    if _LOADER is None:
        _LOADER = _yaml_loader()
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_yaml_keys(node, where)
        return loader.construct_document(node)
    except TensorcadError as e:
        raise TensorcadError(e.path or where, e.message) from None
    except RecursionError:
        raise _too_deep(where) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise TensorcadError(where, f"is not valid YAML: {problem}{at}") from None
    finally:
        loader.dispose()
