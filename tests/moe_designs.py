"""Tiny designs whose blocks take a mixture of experts, shared by the moe tests (tests/ is on sys.path)."""

MLP = "nodes[1].params.block.params.mlp"


def design(moe: dict, documents: bool = False) -> dict:
    """A two-layer design whose blocks take ``moe`` (a moe's params) as their feed-forward."""
    inputs = {"ids": {"role": "tokens"}, **({"doc": {"role": "documents"}} if documents else {})}
    attention = {"heads": 4, "rope": {"theta": 10000}}
    wires = {"x": "embed", **({"doc": "doc"} if documents else {})}
    if documents:
        attention["mask"] = "doc(b, q) == doc(b, kv)"
    return {
        "name": "tiny-moe", "context": 64, "inputs": inputs,
        "nodes": [
            {"id": "embed", "kind": "embedding", "in": {"x": "ids"}, "params": {"vocab": 100, "dim": 32}},
            {"id": "layers", "kind": "stack", "in": wires, "params": {"repeat": 2, "block": {
                "kind": "transformer_block", "params": {"attention": attention, "mlp": {"kind": "moe", **moe}}}}},
            {"id": "norm", "kind": "rmsnorm", "in": {"x": "layers"}},
            {"id": "head", "kind": "linear", "in": {"x": "norm"}, "params": {"out": 100}},
        ],
        "output": "head",
    }


BASE = {"experts": 4, "top_k": 2, "hidden": 16}
