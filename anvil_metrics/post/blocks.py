"""Every block of `benchmark.json` beside its run fields, registered once (`BLOCKS`).

Why a list: the build (`benchmark.py`), `anvil verify` (`verify.py`), the CLI's summary
(`runs/launch.py`), the JSON Schema and `docs/fields.md` (`schemas/build.py`) each walk
it, so a block written in its own module (`blockkit.Block`: its definition, build, rules
and lines) is in all of them with one entry here. Order matters in one way: a block is
built after the ones above it (the steady state reads the `load` block; the steps read
the goodput criteria), and its CLI lines come in this order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from anvil_metrics.post import (
    cancelblock,
    clientblock,
    conversations,
    energyblock,
    goodput,
    headerblocks,
    hooksblock,
    jobsblock,
    loadblock,
    mixblock,
    pergpu,
    probeblock,
    replicasblock,
    steady,
    steps,
    traceblock,
)
from anvil_metrics.post.blockkit import Block
from anvil_metrics.telemetry import serverfields, servermetrics

BLOCKS: tuple[Block, ...] = (
    Block("goodput", goodput.Goodput | None,
          "the requests meeting every goodput criterion the run was given; absent without "
          "criteria", goodput.build, goodput.verify),
    Block("steps", list[steps.Step] | None,
          "one block per step of a stepped run (a sweep or a load shape); a request belongs "
          "to the step in force when it started; absent without steps",
          steps.build, steps.verify),
    # after `steps`: it sets the per-GPU keys of each step's metrics too
    Block("per_gpu", pergpu.PerGpu | None,
          "the inputs of the per-GPU and per-dollar metrics (output_tok_s_per_gpu, "
          "requests_s_per_gpu, usd_per_m_output_tokens, usd_per_m_input_tokens): gpus, the "
          "GPU-hour price, the window and its GPU-hours (post/pergpu.py); absent without "
          "gpus", pergpu.build, pergpu.verify, pergpu.summary_lines),
    Block("conversation", conversations.Conversation | None,
          "a multi-turn run's conversations and each turn's figures; absent without a "
          "[conversation]", conversations.build, conversations.verify,
          conversations.summary_lines),
    Block("mix", mixblock.MixBlock | None,
          "a request mix's classes and models: each one's share beside its planned share, "
          "and its own latencies (post/mixblock.py); absent without [[request_class]] or "
          "[models]", mixblock.build, mixblock.verify, mixblock.summary_lines),
    Block("replicas", replicasblock.Replicas | None,
          "a run over several replicas (-H URL,URL): each one's requests, failures and "
          "latencies, and the balance between them (post/replicasblock.py); absent with one "
          "host", replicasblock.build, replicasblock.verify, replicasblock.summary_lines),
    Block("cancel", cancelblock.Cancel | None,
          "the requests closed on purpose (--cancel-rate, [cancel]): how many and where "
          "(post/cancelblock.py); absent without cancellation",
          cancelblock.build, cancelblock.verify, cancelblock.summary_lines),
    Block("trace", traceblock.Trace | None,
          "a replayed trace: what was replayed, and the prefix reuse it allows beside the "
          "server's; absent without --trace", traceblock.build, traceblock.verify,
          traceblock.summary_lines),
    Block("hooks", list[hooksblock.HookCall] | None,
          "the control hooks the run called (--reset-prefix-cache, --server-profile): each "
          "call's target, "
          "answer and time; absent without hooks", hooksblock.build,
          summary=hooksblock.summary_lines),
    Block("load", loadblock.Load | None,
          "how load was offered (closed or open loop) and what the run achieved of it; "
          "absent in files from before the block", loadblock.build, loadblock.verify,
          loadblock.summary_lines),
    # after `load`: a job's latency from due reads its arrival (an open loop's)
    Block("jobs", jobsblock.Jobs | None,
          "an agent replay's jobs: completed and cut, job latency, jobs per hour (per "
          "GPU), where a job's time went, per-job requests, tokens and prefix reuse, context "
          "overflows and the validity verdict (post/jobsblock.py); absent without agent "
          "jobs", jobsblock.build, jobsblock.verify, jobsblock.summary_lines),
    Block("steady_state", steady.SteadyState | None,
          "did the run reach a steady state: the plateau of its load and whether its "
          "latencies held there (post/steady.py); null in a stepped run; absent in a file "
          "written before anvil had it", steady.build, steady.verify, steady.summary_lines),
    Block("server", serverfields.Server | None,
          "what the server's metrics endpoint said about itself over the measured window; "
          "absent in files from before the block", headerblocks.build_server_block, None,
          servermetrics.summary_lines),
    Block("energy", energyblock.Energy | None,
          "the joules the server's GPUs spent over the measured window (energy.jsonl: "
          "--energy-url, --energy nvml, --energy-metric), per output token and per request "
          "where energy and tokens cover the same window (post/energyblock.py); absent "
          "without an energy source", energyblock.build, energyblock.verify,
          energyblock.summary_lines),
    Block("probe", probeblock.Probe | None,
          "the head-of-line probe (--probe-rate): tiny requests on their own connections, "
          "their TTFT idle and under load and the delay the load added (post/probeblock.py, "
          "from probe.jsonl); absent without probes", probeblock.build, None,
          probeblock.summary_lines),
    Block("client", clientblock.Client | None,
          "the load generator's own health over the load, so that its delays are not taken "
          "for the server's; null when not measured", clientblock.build, clientblock.verify,
          clientblock.summary_lines),
    Block("endpoint", headerblocks.Endpoint,
          "what the requests were posted to: chat (/v1/chat/completions), completions "
          "(/v1/completions, a text prompt sized without a chat template), responses "
          "(/v1/responses, streamed events), embeddings (/v1/embeddings, one answer, no "
          "output: its rows have no time to first output) or messages (/v1/messages, the "
          "Anthropic Messages API, streamed events); absent in files from before it (chat)",
          headerblocks.build_endpoint),
    Block("prompt_ids", Literal[True],
          "true when each prompt was sent as the server's token ids (--prompt-ids: exactly "
          "the planned count); absent otherwise", headerblocks.build_prompt_ids),
    Block("dataset", headerblocks.Dataset | None,
          "{file, format, entries}: the prompts came from this dataset file (their sizes are "
          "the server's counts, planned_context_tokens null); absent without --dataset",
          headerblocks.build_dataset),
    Block("request_headers", dict[str, str],
          "the extra HTTP headers sent with every request (--header, the scenario's "
          "[headers]), name → value, a credential's value (a name holding auth, key, token, "
          "secret, passw, cookie or credential) \"[redacted]\"; absent without any",
          headerblocks.build_request_headers, headerblocks.verify_request_headers),
)


def registered(extra: Iterable[Block] = ()) -> tuple[Block, ...]:
    """`BLOCKS` and `extra` (a block being added: tests), names unique."""
    out = (*BLOCKS, *extra)
    names = [b.name for b in out]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"two blocks of one name: {twice}")
    return out
