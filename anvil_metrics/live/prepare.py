"""What a run needs of the server before its first measured byte: the model it serves, how it
counts tokens, every planned prompt sized and every request body built.

Why apart from `session.py`: this is the run's set-up against the server (bounded probes,
calibration, the calibration cache), done once and before any load, whose result is plain
data (`Prepared`); the session only keeps it. A plan the server says it cannot hold is
refused here, before a run folder exists.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from anvil_metrics.errors import UsageError
from anvil_metrics.load.agentbodies import AgentBodies
from anvil_metrics.load.agentjob import Job
from anvil_metrics.load.body import (
    BodyBuilder,
    ConversationBodies,
    DatasetBodies,
    RequestBodies,
    TraceBodies,
    body_fields,
)
from anvil_metrics.load.dataset import DatasetEntry, DatasetTurns
from anvil_metrics.load.mixbodies import MixBodies
from anvil_metrics.load.options import RunOptions
from anvil_metrics.load.scenario import Scenario
from anvil_metrics.load.scenariofields import TEXT_ENDPOINTS
from anvil_metrics.load.trace import TraceRequest
from anvil_metrics.prep import calcache
from anvil_metrics.prep.counting import Counter, server_counter, text_counter, token_ids_of
from anvil_metrics.prep.model import check_model_served, discover_model
from anvil_metrics.prep.prompts import (
    NO_CALIBRATION,
    Calibration,
    PromptFactory,
    SharedPrefix,
    calibrate_by_probe,
    messages_for,
    request_prefix,
)
from anvil_metrics.prep.traceprompts import WORDS, TracePrompts
from anvil_metrics.prep.turns import ConversationPrompts, TurnSizes, size_turn_texts
from anvil_metrics.urls import Endpoint
from anvil_metrics.wire.client import ChatClient

log = logging.getLogger("anvil")


@dataclass(frozen=True, slots=True)
class Prepared:
    """The run's requests, ready: the model named in every body, the sized prompts, what
    the raw header records of their sizing (`prepare_prompts`), and the bodies; with a
    `[conversation]`, its sized turns too (`conversations`; the single-turn bodies then
    serve only warm-up requests)."""

    model: str
    prompts: PromptFactory
    sizing: dict[str, Any]
    bodies: RequestBodies
    conversations: ConversationBodies | None = None


def prepare_requests(opts: RunOptions, endpoint: Endpoint, nonce: str, sizes: list[int],
                     shared: SharedPrefix | None,
                     trace: list[TraceRequest] | None = None,
                     dataset: list[DatasetEntry] | None = None,
                     phase: Callable[[str], None] = lambda _: None,
                     jobs: list[Job] | None = None) -> Prepared:
    """Resolve the model (the scenario's, checked against the server's list, or the
    server's first), find how the server counts tokens, refuse a plan beyond its context
    limit, size every prompt and build every body; one probe client, closed at the end.
    `phase` is told each step as it begins (a signal's error.json names it: `runerror`)."""
    sc = opts.scenario
    phase("finding the model")
    client = ChatClient(endpoint, opts.api_key, connect_timeout_s=sc.timeouts.connect_s,
                        network_timeout_s=sc.timeouts.first_byte_s, extra_headers=sc.headers)
    try:
        model = sc.meta.get("model")
        if model:  # the user's name: check it against the server's list
            check_model_served(client, model)
        else:  # the server's own first model: nothing to check
            model = discover_model(client)
        for name in sc.mix.model_names if sc.mix is not None else ():
            check_model_served(client, name)  # a mix's models and adapters: each served
        fields = _chat_fields(sc, model)
        phase("asking how the server counts tokens")
        counter = (text_counter(client, fields, sc.endpoint, opts.tokenizer_path)
                   if sc.endpoint in TEXT_ENDPOINTS
                   else server_counter(client, fields, opts.tokenizer_path))
        if jobs is not None:  # agent jobs: each turn's blocks, built as it is sent
            return prepare_agents(opts, counter, model, nonce, jobs)
        mixed = sc.mix is not None and sc.conversation is None
        planned = sizes  # request k's size is planned[k % len], or its class's own
        if mixed:
            sizes = sorted({*sizes, *sc.mix.class_sizes()})
        check_server_limit(counter.max_model_len, sizes, sc)
        if trace is not None:  # a replay: the trace's own prompts, no calibration
            return prepare_trace(opts, counter, model, nonce, trace)
        if dataset is not None and sc.conversation is None:  # a dataset's single prompts
            sizing = {"counter": counter.source, "cache": "off", "counted": {},
                      "expected_shared_tokens": None}
            prompts = PromptFactory(NO_CALIBRATION, sc.context_seed, nonce, None, None)
            bodies = DatasetBodies(sc, model, dataset)
            if opts.tokenizer_path:  # a local count of each entry the run sends: its plan
                used = len(dataset) if sc.requests is None else min(len(dataset), sc.requests)
                bodies = DatasetBodies(sc, model, dataset,
                                       [counter.count(bodies.messages(j)) for j in range(used)])
            return Prepared(model, prompts, sizing, bodies)
        phase("sizing the prompts")
        prompts, sizing = prepare_prompts(opts, client, counter, fields, model, nonce, sizes,
                                          shared)
        phase("building the request bodies")
        if mixed:
            template = 0  # the chat template's tokens, which trace classes are sized around
            if any(c.trace is not None for c in sc.mix.classes):
                template = sizing["template_tokens"] = template_tokens(counter)
            bodies = MixBodies(sc, model, prompts, planned, template)
            bodies.prepare(counter.count)
        else:
            ids_of = token_ids_of(client, model) if sc.prompt_ids else None
            bodies = BodyBuilder(sc, model, prompts, ids_of)
            bodies.prepare(sizes)
        conversations = None
        if sc.conversation is not None and dataset is not None:  # a dataset's conversations
            conversations = ConversationBodies(sc, model, DatasetTurns(dataset, nonce))
        elif sc.conversation is not None:
            conversations = prepare_conversations(opts, counter, prompts.calibration, model,
                                                  nonce, sizing)
    finally:
        client.close()
    return Prepared(model, prompts, sizing, bodies, conversations)


def _chat_fields(sc: Scenario, model: str) -> dict[str, Any]:
    """The body fields a prompt is counted with: a Responses request's input and a Messages
    request's system and messages are templated as the chat request's messages (vLLM, the
    simulator), so each is counted as one."""
    return body_fields(replace(sc, endpoint="chat") if sc.endpoint in ("responses", "messages")
                       else sc, model)


def prepare_conversations(opts: RunOptions, counter: Counter, calibration: Calibration,
                          model: str, nonce: str, sizing: dict[str, Any]) -> ConversationBodies:
    """Size a conversation's pieces with the server's count (`prep/turns.py`; the
    calibration's estimate where there is no counter) and record what was counted in
    `sizing["conversation"]`."""
    sc = opts.scenario
    plan = sc.conversation
    assert plan is not None
    count = counter.count if calibration.method != "none" else None
    sizes = TurnSizes(plan.turn_tokens, plan.prefix_tokens, plan.system_prompt_tokens)
    try:
        texts = size_turn_texts(sizes, calibration, sc.context_seed, nonce, count)
    except Exception as e:  # a count failed: the estimate, said so
        log.warning("anvil: conversation sizing failed (%s); sizing by estimate", e)
        texts = size_turn_texts(sizes, calibration, sc.context_seed, nonce)
    sizing["conversation"] = {"counted": texts.counted}
    return ConversationBodies(sc, model, ConversationPrompts(texts, nonce))


def prepare_trace(opts: RunOptions, counter: Counter, model: str, nonce: str,
                  trace: list[TraceRequest]) -> Prepared:
    """A replay's bodies (`prep/traceprompts.py`): the chat template's tokens counted once
    (a one-token message less its word), then the first request's whole prompt counted to
    check its size; without a count, no template tokens are assumed (said so)."""
    sc = opts.scenario
    assert sc.trace is not None
    overhead, checked = template_tokens(counter), None
    bodies = TraceBodies(sc, model, trace, TracePrompts(nonce, sc.trace.block_tokens,
                                                        overhead), nonce)
    try:
        checked = counter.count(bodies.messages(0))
    except Exception as e:
        log.warning("anvil: could not count the trace's first prompt (%s)", e)
    sizing = {"counter": counter.source, "cache": "off",
              "counted": {str(trace[0].input_tokens): checked},
              "expected_shared_tokens": None, "template_tokens": overhead}
    calibration = Calibration(counter.method, float(overhead), 1.0)  # a word is a token
    prompts = PromptFactory(calibration, sc.context_seed, nonce, None, None)
    return Prepared(model, prompts, sizing, bodies)


def prepare_agents(opts: RunOptions, counter: Counter, model: str, nonce: str,
                   jobs: list[Job]) -> Prepared:
    """An agent replay's bodies (`load/agentbodies.py`), sized as a trace's: the chat
    template's tokens counted once, the first job's first prompt counted to check it. No
    turn exceeding the server's context is refused here: AgentX counts such overflows
    against a run's validity, so they are sent and fail as the server answers."""
    overhead, checked = template_tokens(counter), None
    opening = counter.opening_tokens
    if opening is None:
        log.warning("anvil: the server does not show the chat template's opening tokens; "
                    "agent prompts put them before the first block (its cache blocks shift)")
    bodies = AgentBodies(opts.scenario, model, jobs, nonce, overhead, opening or 0)
    first = jobs[0].root
    try:
        checked = counter.count([{"role": "user", "content": bodies.text(0, first, 0)}])
    except Exception as e:
        log.warning("anvil: could not count the first agent prompt (%s)", e)
    sizing = {"counter": counter.source, "cache": "off",
              "counted": {str(first.turns[0].input_tokens): checked},
              "expected_shared_tokens": None, "template_tokens": overhead,
              "template_opening_tokens": opening}
    calibration = Calibration(counter.method, float(overhead), 1.0)  # a word is a token
    prompts = PromptFactory(calibration, opts.scenario.context_seed, nonce, None, None)
    return Prepared(model, prompts, sizing, bodies)


def template_tokens(counter: Counter) -> int:
    """The chat template's tokens around one message (a one-token message's count less its
    word), which a trace's blocks are sized around; 0, said so, when it cannot be counted."""
    try:
        return counter.count([{"role": "user", "content": WORDS[0]}]) - 1
    except Exception as e:  # counting is best effort: the sizes are then estimates
        log.warning("anvil: could not count the chat template's tokens (%s); trace prompts "
                    "are sized without them", e)
    return 0


def check_server_limit(max_model_len: int | None, sizes: list[int], sc: Scenario) -> None:
    """Refuse, before any load, a plan the server says it cannot hold (vLLM's `/tokenize`
    reports `max_model_len`): otherwise those requests would all fail with HTTP 400."""
    if max_model_len is None:
        return
    worst = max(sizes)
    if worst + sc.max_tokens > max_model_len:
        raise UsageError(
            f"the server's context limit is {max_model_len} tokens (max_model_len), but "
            f"{sc.source or 'the scenario'} plans {worst} + max_tokens {sc.max_tokens} = "
            f"{worst + sc.max_tokens}; plan sizes of at most {max_model_len - sc.max_tokens} "
            "or serve a longer context")


def prepare_prompts(opts: RunOptions, client: ChatClient, counter: Counter,
                     fields: dict[str, Any], model: str, nonce: str, sizes: list[int],
                     shared: SharedPrefix | None) -> tuple[PromptFactory, dict[str, Any]]:
    """Count, calibrate and size every planned prompt (or reuse a cached calibration).

    Returns the factory and what the raw header records about it: which counter, whether
    the cache answered, the server's count per size, and how many leading tokens the
    run's requests are expected to share (the template header and system prompt; the
    prefix in shared-prefix mode): more cached tokens than that is a surprise."""
    sc = opts.scenario
    key, parts = calcache.cache_key(
        base_url=client.endpoint.base_url, model=model, counter=counter.source,
        system_prompt=sc.system_prompt, seed=sc.context_seed,
        template={k: fields.get(k) for k in ("chat_template_kwargs", "reasoning_effort")},
        shared_prefix_tokens=shared.prefix_tokens if shared else None,
        nonce_chars=len(nonce))
    cached = None if (opts.recalibrate or not opts.calibrate) else calcache.load(
        opts.results_dir, key)
    calibration: Calibration = NO_CALIBRATION
    if cached is not None:
        calibration = cached.calibration
    elif opts.calibrate:
        try:
            calibration = calibrate_by_probe(counter.count, sc.context_seed, sc.system_prompt,
                                             method=counter.method)
        except Exception as e:  # any counting failure: size by estimate, say so
            log.warning("anvil: prompt calibration failed (%s); sizing by estimate", e)
    prompts = PromptFactory(calibration, sc.context_seed, nonce, sc.system_prompt, shared,
                            words=cached.words if cached else None,
                            prefix_words=cached.prefix_words if cached else None)
    count = counter.count if calibration.method != "none" else None
    # With a cheap counter (no prefill), even cached word counts are counted once: the run's
    # own head (its nonce) may tokenize a little differently; with probes, trust the cache.
    recount = cached is not None and counter.method != "probe"
    try:
        counted_now = prompts.prepare(sizes, count, recount_known=recount)
    except Exception as e:  # a correction count failed: keep the fitted sizes
        log.warning("anvil: prompt size correction failed (%s); using the fit", e)
        counted_now = prompts.prepare(sizes)
    known = dict(cached.counted) if cached else {}
    counted = {s: counted_now.get(s) if counted_now.get(s) is not None else known.get(s)
               for s in set(sizes)}
    if count is not None and any(v is not None for v in counted_now.values()):
        known.update({k: v for k, v in counted_now.items() if v is not None})
        calcache.store(opts.results_dir, key, parts, calcache.CachedCalibration(
            calibration, dict(prompts.words), known, prompts.prefix_words))
    expected_shared = expected_shared_tokens(prompts, counter.count if count else None,
                                              sc.system_prompt)
    sizing = {
        "counter": counter.source,
        "cache": "hit" if cached is not None else ("stored" if count else "off"),
        "cache_key": key,
        "counted": {str(k): v for k, v in sorted(counted.items())},
        "expected_shared_tokens": expected_shared,
    }
    if shared is not None:
        sizing["prefix_counted"] = prompts.prefix_counted
    return prompts, sizing


def expected_shared_tokens(prompts: PromptFactory, count: Any, system_prompt: str | None
                            ) -> int:
    """How many leading prompt tokens two requests of this run may legitimately share:
    the chat template header, the system prompt and at most a whole head line (two
    indices can share all but one digit; or, in shared-prefix mode, the group's whole
    prefix). Counted where counting is available, else estimated from the calibration."""
    if prompts.shared is not None:
        return prompts.shared.prefix_tokens
    lead = request_prefix(prompts.run_nonce, 0).rstrip()
    if count is not None:
        try:
            return int(count(messages_for(lead, system_prompt)))
        except Exception:  # counting is best effort here; fall back to the estimate
            pass
    cal = prompts.calibration
    words = len(lead.split()) + len((system_prompt or "").split())
    return int(cal.overhead_tokens + cal.tokens_per_word * words) + 8
