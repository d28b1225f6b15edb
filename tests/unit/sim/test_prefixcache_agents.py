"""The simulator's prefix cache counts an agent trace's sharing as `agentstats` expects it,
so item 6's reuse check compares like with like: 200 generated jobs' prompts, laid out with
the chat template's tokens inside the trace's blocks (the first block holds the template's
opening, the last its closing and generation prompt: every `hash_id` is one 64-token block
of the templated prompt, as the server counts it), go through `PrefixCache` in the order
`agentstats` assumes (jobs in order, a job's requests by `t`, each prefill done before the
next request). With `--prefix-cache-block` equal to the trace's block and a capacity of at
least the trace's summed prompt tokens (nothing is ever evicted: the unbounded cache
`agentstats` assumes), its hits equal the expected reuse token for token; a smaller cache
evicts and hits less, which is why the proof sets the capacity so."""

from __future__ import annotations

from agentgen import BLOCK, agent_jobs
from agenttruth import block_prompt, fit_job, template_tokens

from anvil_metrics.load.agentjob import Job
from anvil_metrics.load.agentstats import job_figures
from anvil_metrics.sim.prefixcache import PrefixCache
from anvil_metrics.sim.tokenizer import prompt_token_ids


def _replayed(jobs: list[Job], capacity_tokens: int) -> tuple[list[int], int]:
    """Each job's cached tokens through the simulator's cache, and the prompts' size errors."""
    cache = PrefixCache(BLOCK, capacity_tokens)
    out, wrong = [], 0
    for job in jobs:
        cached = 0
        for t in sorted((t for s in job.sessions for t in s.turns), key=lambda t: t.t_s):
            ids = prompt_token_ids(block_prompt(t, BLOCK))
            wrong += len(ids) != t.input_tokens
            found = cache.lookup(ids)
            cache.insert(found.keys)
            cached += found.cached_tokens
        out.append(cached)
    return out, wrong


def test_the_simulators_hits_are_agentstats_expected_reuse() -> None:
    opening, closing = template_tokens()
    assert 0 < opening < BLOCK and 0 < closing < BLOCK
    jobs = [fit_job(j) for j in agent_jobs(200, seed=1)]
    figures = job_figures(jobs)
    total = sum(t.input_tokens for j in jobs for s in j.sessions for t in s.turns)
    cached, wrong = _replayed(jobs, capacity_tokens=total)
    assert wrong == 0
    assert cached == [f.cached_tokens for f in figures]
    assert sum(cached) > 0.3 * total  # the trace shares: the equality is not of zeros
    smaller, _ = _replayed(jobs, capacity_tokens=8 * BLOCK)  # less than one job's blocks
    assert sum(smaller) < sum(cached)  # evictions: why the proof's capacity is the total
