"""The runtime: everything that needs torch, in three rooms.

- ``building``: scale a design down, build its generated model, the subject
  every check reads (a design scaled, built, seeded, with its batch), the
  settings and their one set of defaults, ``torch.export``, block masks and
  FLOPs counted by PyTorch;
- ``certification``: the one registry of checks and certificates (isolation,
  boundary moves, faithful, gradients, closed forms, block counts, goldens),
  ``certify`` and ``verify``;
- ``training``: ``smoke-train`` (on a made-up task or a corpus) and ``trace``.

A room imports only the rooms below it (training, certification, building).
Names load lazily, so `import tensorcad.runtime` stays cheap (and `scale` needs
no torch). Modules are named for what they hold, never after a function they
export: an imported submodule would otherwise shadow the function of the same
name.
"""

from __future__ import annotations

from tensorcad.faces import lazy

_LAZY = {
    "scale": ".building:scale",
    "build": ".building:build",
    "with_mtp": ".building.mtp:with_mtp",
    "load_module": ".building:load_module",
    "Subject": ".building:Subject",
    "Settings": ".building:Settings",
    "verify": ".certification:verify",
    "VerifyReport": ".certification:VerifyReport",
    "certify": ".certification:certify",
    "Check": ".certification:Check",
    "check_isolation": ".certification:check_isolation",
    "IsolationResult": ".certification:IsolationResult",
    "Leak": ".certification:Leak",
    "check_boundaries": ".certification:check_boundaries",
    "check_faithful": ".certification:check_faithful",
    "check_gradient_isolation": ".certification:check_gradient_isolation",
    "ModelSubject": ".certification:ModelSubject",
    "smoke_train": ".training:smoke_train",
    "train_on_corpus": ".training:train_on_corpus",
    "trace": ".training:trace",
}

__all__ = list(_LAZY)
__getattr__, __dir__ = lazy(__name__, _LAZY)
