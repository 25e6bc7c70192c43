"""`guarding()`: while open, every transformers `Trainer` and lightning `Trainer` built gets the guard's callback.

What ``pytest --tensorcad-guard`` wraps each test in, so a user's own training
test is guarded without a line changed. Only libraries the test already
imported are patched (importing transformers or lightning here would cost
every test seconds); a Trainer that already holds a tensorcad callback keeps it.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator


def _guard_transformers(stack: contextlib.ExitStack) -> None:
    import transformers

    from .trainer import TensorcadCallback

    original = transformers.Trainer.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if not any(isinstance(c, TensorcadCallback) for c in self.callback_handler.callbacks):
            self.add_callback(TensorcadCallback())

    transformers.Trainer.__init__ = __init__
    stack.callback(setattr, transformers.Trainer, "__init__", original)


def _guard_lightning(stack: contextlib.ExitStack) -> None:
    from lightning.pytorch import Trainer

    from .lightning_callback import TensorcadLightningCallback

    original = Trainer.__init__

    @functools.wraps(original)
    def __init__(self, *args, callbacks=None, **kwargs):
        callbacks = [] if callbacks is None else list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
        if not any(isinstance(c, TensorcadLightningCallback) for c in callbacks):
            callbacks.append(TensorcadLightningCallback())
        original(self, *args, callbacks=callbacks, **kwargs)

    Trainer.__init__ = __init__
    stack.callback(setattr, Trainer, "__init__", original)


@contextlib.contextmanager
def guarding() -> Iterator[None]:
    """Guard every Trainer built inside the block."""
    with contextlib.ExitStack() as stack:
        if "transformers" in sys.modules:
            _guard_transformers(stack)
        if "lightning" in sys.modules or "lightning.pytorch" in sys.modules:
            _guard_lightning(stack)
        yield
