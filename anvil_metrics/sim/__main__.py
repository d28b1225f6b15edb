"""`python -m anvil_metrics.sim` runs the simulator, the same as `anvil sim`."""

import sys

from anvil_metrics.sim.server import main

sys.exit(main())
