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

from tensorcad.faces import lazy

_LAZY = {
    "TensorcadCallback": "harness.integrations.trainer:TensorcadCallback",
    "TensorcadLightningCallback": "harness.integrations.lightning_callback:TensorcadLightningCallback",
}

__all__ = list(_LAZY)
__getattr__, __dir__ = lazy(__name__, _LAZY)
