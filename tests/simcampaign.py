"""Two simulators as a campaign's two variants: the simulator's flags, the scenario and the
campaign file the real campaign tests run (`anvil campaign run`, restoration)."""

from __future__ import annotations

SIM = ("--model", "org/sim", "--prefill-ms", "5", "--content-tokens", "10",
       "--reasoning-tokens", "0", "--max-context", "8192")


SCENARIO = """\
measurement_protocol = "count"
concurrency = 1
requests = 3
warmup_requests = 0
max_tokens = 16
context_tokens = 8192
max_context_tokens = 8192
[context_distribution]
200 = 1
"""


CAMPAIGN = """\
name = "sims"
scenario = "s.toml"
runs_per_variant = {runs}
placements = {placements}
candidate = "sim/on"
incumbent = "sim/off"
reset_prefix_cache = "auto"

[[variants]]
model = "sim"
served_model = "org/sim"
speculation = "off"
host = "{slow}"
{before}

[[variants]]
model = "sim"
served_model = "org/sim"
speculation = "on"
host = "{fast}"

[gates]
e2e_p50_improvement_percent = 10
"""

