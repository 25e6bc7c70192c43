"""The guard in a real training run: callbacks over ``tensorcad.guard``.

```python
from harness.integrations import TensorcadCallback            # transformers' Trainer, TRL's SFTTrainer
trainer = SFTTrainer(model=model, args=args, train_dataset=ds, callbacks=[TensorcadCallback()])
from harness.integrations import TensorcadLightningCallback   # lightning (the lightning extra)
lightning.Trainer(callbacks=[TensorcadLightningCallback()])
```

Names load on first use: importing the package imports neither transformers nor lightning.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "TensorcadCallback": "harness.integrations.trainer",
    "TensorcadLightningCallback": "harness.integrations.lightning_callback",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'harness.integrations' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value
