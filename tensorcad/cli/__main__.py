"""`python -m tensorcad.cli`: the `tensorcad` command, where its script is not on PATH."""

import sys

from .dispatch import main

sys.exit(main())
