"""The guard in a real training run: callbacks over ``tensorcad.guard``.

```python
from tensorcad.testing.integrations import TensorcadCallback            # transformers' Trainer, TRL's SFTTrainer
trainer = SFTTrainer(model=model, args=args, train_dataset=ds, callbacks=[TensorcadCallback()])
from tensorcad.testing.integrations import TensorcadLightningCallback   # lightning (the lightning extra)
lightning.Trainer(callbacks=[TensorcadLightningCallback()])
```

Names load on first use: importing the package imports neither transformers nor lightning.
"""

from __future__ import annotations

from tensorcad.faces import lazy

_LAZY = {
    "TensorcadCallback": "tensorcad.testing.integrations.trainer:TensorcadCallback",
    "TensorcadLightningCallback": "tensorcad.testing.integrations.lightning_callback:TensorcadLightningCallback",
    "TensorcadRLCallback": "tensorcad.testing.integrations.rl:TensorcadRLCallback",
}

__all__ = list(_LAZY)
__getattr__, __dir__ = lazy(__name__, _LAZY)
