"""`python -m anvil_metrics` is the same as the `anvil` command."""

import sys

from anvil_metrics.cli.main import main

sys.exit(main())
