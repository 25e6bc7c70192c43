"""Multi-token prediction's runtime (DeepSeek-V3), as text: what a generated module carries when its design says
``mtp``, and what ``tensorcad.runtime.with_mtp`` loads and runs around any generated model, one code for both.

Pasted after the model's classes; it reads ``torch``, ``nn`` and ``copy`` from the module's imports.
"""

MTP_RUNTIME = '''
# ---------------------------------------------------------------------------
# Multi-token prediction (DeepSeek-V3): modules trained beside the model, each
# one block like the stack's last, sharing the embedding and the output head;
# dropped to serve. Under packing every "k ahead" stays in its document.
# ---------------------------------------------------------------------------

IGNORE = -100


def roll_within_documents(values, documents, k, fill):
    """``values`` k positions ahead, ``fill`` past the row's end or in another document."""
    ahead = torch.full_like(values, fill)
    if k < values.shape[1]:
        same = documents[:, k:] == documents[:, :-k]
        kept = torch.where(same, values[:, k:], torch.full_like(values[:, k:], fill))
        ahead[:, : values.shape[1] - k] = kept
    return ahead


def _plain_roll(values, documents, k, fill):
    """The bug the certificates catch: the row rolled, boundaries ignored."""
    ahead = torch.roll(values, -k, dims=1)
    ahead[:, values.shape[1] - k :] = fill
    return ahead


class MultiTokenPrediction(nn.Module):
    """A model with ``depth`` MTP modules; the model's own calls and outputs unchanged.

    Module k takes the previous depth's hidden state h (the trunk's last, before
    its final norm, for k = 1) and the embedding of the token k ahead, computes
    h_k = block(W [norm(h); norm(emb)]), and its logits are the shared head over
    a norm of h_k, trained on the token k + 1 ahead.
    """

    def __init__(
        self,
        model,
        depth,
        *,
        roll="documents",
        embedding="embed",
        head="head",
        norm="norm",
        blocks="layers",
    ):
        super().__init__()
        if not 1 <= depth <= 8:
            raise ValueError(f"an MTP depth of 1..8, not {depth}")
        if roll not in ("documents", "plain"):
            raise ValueError(f"roll is 'documents' or 'plain', not {roll!r}")
        self.model, self.depth, self.roll = model, depth, roll
        self._names = (embedding, head, norm, blocks)
        trunk_norm, last = getattr(model, norm), getattr(model, blocks)[-1]
        dim = getattr(model, embedding).embedding_dim
        self.mtp = nn.ModuleList()
        for _ in range(depth):
            module = nn.Module()
            module.hnorm = copy.deepcopy(trunk_norm)
            module.enorm = copy.deepcopy(trunk_norm)
            module.norm = copy.deepcopy(trunk_norm)
            module.eh_proj = nn.Linear(2 * dim, dim, bias=False)
            module.block = copy.deepcopy(last)
            module.apply(model._init_weights)  # fresh, as the model inits its own
            self.mtp.append(module)
        self.config = getattr(model, "config", None)
        self.vocab = getattr(model, head).out_features

    def _roll(self, values, documents, k, fill):
        rolled = roll_within_documents if self.roll == "documents" else _plain_roll
        return rolled(values, documents, k, fill)

    def heads(self, ids, documents=None, positions=None):
        """[main logits, head 1's, ..., head depth's], each (B, T, V)."""
        embedding, head, norm, blocks = (getattr(self.model, n) for n in self._names)
        seen = {}

        def keep_hidden(module, args):
            seen["h"] = args[0]

        def keep_ports(module, args, kwargs):
            seen["kw"] = kwargs

        hooks = [
            norm.register_forward_pre_hook(keep_hidden),
            blocks[-1].register_forward_pre_hook(keep_ports, with_kwargs=True),
        ]
        try:
            main = self.model(ids, *self._inputs(documents, positions))
        finally:
            for hook in hooks:
                hook.remove()
        h, out = seen["h"], [main]
        documents = torch.zeros_like(ids) if documents is None else documents
        for k, module in enumerate(self.mtp, start=1):
            # token 0 where nothing lies k ahead: its target is ignored
            ahead = self._roll(ids, documents, k, 0)
            both = torch.cat([module.hnorm(h), module.enorm(embedding(ahead))], dim=-1)
            h = module.block(module.eh_proj(both), **seen["kw"])
            out.append(head(module.norm(h)))
        return out

    def forward(self, ids, documents=None, positions=None):
        return self.model(ids, *self._inputs(documents, positions))

    @staticmethod
    def _inputs(documents, positions):
        """The model's inputs after the ids: those it reads (a design without documents takes none)."""
        return [x for x in (documents, positions) if x is not None]

    def all_logits(self, ids, documents=None, positions=None):
        """Every head's logits side by side, (B, T, (1 + depth) x V)."""
        return torch.cat(self.heads(ids, documents, positions), dim=-1)

    def mtp_targets(self, targets, documents):
        """(depth, B, T): head k's target at t, the main target k ahead in t's document."""
        ks = range(1, self.depth + 1)
        return torch.stack([self._roll(targets, documents, k, IGNORE) for k in ks])


def with_mtp(model, depth, *, roll="documents", **names):
    """``model`` with ``depth`` MTP modules sharing its embedding and head."""
    return MultiTokenPrediction(model, depth, roll=roll, **names)
'''
