"""The `server` block's roles: one server's figures per `--server-metrics-url ROLE=URL`.

Why a role is its own server: in a disaggregated or routed deployment (prefill and decode
servers, a router, replicas) each server's `/metrics` describes only itself, and its means
and gauges mean nothing once mixed with another's. So each role is scraped by its own
sampler child into `server_metrics.<role>.jsonl` (one file per role: each child writes
alone, and a role's file reads as the one server's file does), the children marked
`first` and `last` together (`sampler.RoleTelemetry`), and each role's figures are
`servermetrics.server_block` over that file alone.

- identity: the engine as the role's metric names tell it; version and context limit null
  (they were asked of `--host` only);
- `client_minus_server_ms`, paired by the role's name (case-insensitive), as the single
  server's is defined (`servermetrics.py`) but only where the role did that part of the
  work: the role named `prefill` made the client's first token, so only
  `first_chunk_vs_ttft` (the client's mean time to first chunk minus this server's mean
  TTFT; `effective_prefill_excl_queue_tok_s` with this server's queue time too); the role
  named `decode` made the tokens after it, so only `tpot` (the client's mean
  `mean_inter_token_latency_ms` minus this server's mean per-request time per output
  token, the closest figure both engines report); every other member, and any other
  role's pairing, null with the reason;
- `combined`: sums over the roles of what adds (requests finished, Δ prompt and
  generation tokens), null when any role's is; never a mean or a gauge. A request two
  roles served (prefill then decode) counts once in each. KV transfers and their bytes
  sum over the roles that count them (a router or an engine without a connector counts
  none), null when none does;
- `steady_state`: each role's own verdict from its own gauges over the window (the rule:
  `post/serversteady.py`, handed in as the `judge`), so a decode server whose queue grows
  while the client's rows look steady says so.

`anvil verify` recomputes every role and `combined` from the files (`check_role_files`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from anvil_metrics.telemetry.engines import ENGINES, delta_of, engine_of
from anvil_metrics.telemetry.servermetrics import (
    FIGURE_KEYS,
    NO_CLIENT,
    ClientFigures,
    Judge,
    _differs,
    as_filed,
    client_figures,
    read_samples,
    role_samples_file,
    server_block,
)

NOT_PAIRED = ("per role: only the roles named prefill (first token) and decode (time per "
              "output token) are paired with the client's figures")
PAIRED = {"prefill": ("first_chunk_vs_ttft", "effective_prefill_excl_queue_tok_s"),
          "decode": ("tpot",)}
PAIR_KEYS = ("first_chunk_vs_ttft", "e2e", "tpot")
TOKENS = (("prompt_tokens", "prompt_hist", "prompt_total"),
          ("generation_tokens", "generation_hist", "generation_total"))


def role_block(role: str, url: str, samples: list[dict[str, Any]] | None,
               client: ClientFigures, judge: Judge | None = None) -> dict[str, Any]:
    """One role's figures (module docstring) from its samples (None: no file) and the
    client's figures over the measured completed requests; `judge`: its steady state's."""
    identity = {"engine": None, "version": None, "max_model_len": None, "metrics_url": url}
    asked = "asked of --host only"
    block = server_block(identity, samples, client, {"version": asked,
                                                     "max_model_len": asked},
                         f"no {url!r} samples file", judge)
    kept = PAIRED.get(role.lower(), ())
    reasons = block["null_reasons"]
    if "effective_prefill_excl_queue_tok_s" not in kept:
        block["effective_prefill_excl_queue_tok_s"] = None
        reasons["effective_prefill_excl_queue_tok_s"] = NOT_PAIRED
    diff = block["client_minus_server_ms"]
    if isinstance(diff, dict):
        diff.update({k: None for k in PAIR_KEYS if k not in kept})
    if not isinstance(diff, dict) or all(v is None for v in diff.values()):
        block["client_minus_server_ms"] = None
        reasons["client_minus_server_ms"] = (
            NOT_PAIRED if not kept else
            f"per role: {role}'s {' or '.join(k for k in kept if k in PAIR_KEYS)} pairing "
            "is missing its server's or the client's mean")
    return dict(block, null_reasons=dict(sorted(reasons.items())))


def role_tokens(samples: list[dict[str, Any]] | None) -> dict[str, tuple[int | None, str]]:
    """Δ prompt and generation tokens over a role's window: key -> (value, why None)."""
    first = next((s for s in samples or () if s.get("mark") == "first" and s.get("ok")), None)
    last = next((s for s in samples or () if s.get("mark") == "last" and s.get("ok")), None)
    names = ENGINES.get(engine_of([s for s in samples or () if s.get("ok")]) or "")
    out: dict[str, tuple[int | None, str]] = {}
    for key, hist, total in TOKENS:
        if first is None or last is None or names is None:
            out[key] = (None, "no successful first and last scrape of known metric names")
            continue
        quantity, suffix = (hist, "_sum") if hist in names else (total, "")
        value, why = delta_of(names, quantity, first["series"], last["series"], suffix)
        out[key] = (None if value is None else int(round(value)), why or "")
    return out


def roles_blocks(roles: Mapping[str, str], folder: Path | None, rows: Any,
                 judge: Judge | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(roles, combined) of the raw header's `roles` (role -> URL), each role's samples
    read from `folder`; `rows`: the measured completed requests (`derive.RowColumns`);
    `judge`: each role's steady-state rule."""
    blocks: dict[str, Any] = {}
    sums: dict[str, int | None] = {"requests": 0, "prompt_tokens": 0, "generation_tokens": 0}
    reasons: dict[str, str] = {}
    client = client_figures(rows) if rows is not None else NO_CLIENT
    for role, url in roles.items():
        samples = read_samples(folder / role_samples_file(role)) if folder else None
        blocks[role] = block = role_block(role, url, samples, client, judge)
        found = {"requests": (block["requests"], block["null_reasons"].get("requests", "")),
                 **role_tokens(samples)}
        for key, (value, why) in found.items():
            if value is None:
                sums[key] = None
                reasons.setdefault(key, f"role {role}: {why or 'not reported'}")
            elif sums[key] is not None:
                sums[key] += value  # type: ignore[operator]
    return blocks, {**sums, **kv_sums(blocks, reasons), "null_reasons": reasons}


def kv_sums(blocks: Mapping[str, Any], reasons: dict[str, str]) -> dict[str, int | None]:
    """`combined`'s KV transfers and bytes: Σ over the roles that count them (module
    docstring); a reason when none does."""
    out: dict[str, int | None] = {}
    for key, member in (("kv_transfers", "transfers"), ("kv_transfer_bytes", "bytes")):
        found = [b["kv_transfer"][member] for b in blocks.values()
                 if isinstance(b.get("kv_transfer"), dict)
                 and b["kv_transfer"][member] is not None]
        out[key] = sum(found) if found else None
        if not found:
            reasons[key] = f"no role counted KV-transfer {member}"
    return out


def with_roles(block: dict[str, Any], params: Mapping[str, Any], folder: Path | None,
               rows: Any, judge: Judge | None = None) -> dict[str, Any]:
    """The run's block with its roles and their sums, when the raw header has roles."""
    roles = params.get("roles")
    if not isinstance(roles, dict) or not roles:
        return block
    block["roles"], block["combined"] = roles_blocks(roles, folder, rows, judge)
    return block


def check_role_files(doc: Mapping[str, Any], rows: Any, folder: Path,
                     problems: list[str], judge: Judge | None = None) -> None:
    """Recompute each role's figures and the sums from the role files beside the
    benchmark and the rows; a difference is one problem line each."""
    block = doc.get("server")
    if not isinstance(block, dict) or not isinstance(block.get("roles"), dict):
        return
    urls = {role: (b or {}).get("metrics_url") for role, b in block["roles"].items()}
    roles, combined = roles_blocks(urls, folder, rows, judge)
    for role, want in roles.items():
        have = block["roles"][role] or {}
        want = as_filed(have, want)
        for key in FIGURE_KEYS:
            if key in want and _differs(have.get(key), want[key]):
                problems.append(f"server.roles.{role}.{key}: file has {have.get(key)!r}, "
                                f"recomputed {want[key]!r} from {role_samples_file(role)}")
    for key, value in combined.items():
        if key != "null_reasons" and _differs((block.get("combined") or {}).get(key), value):
            problems.append(f"server.combined.{key}: file has "
                            f"{(block.get('combined') or {}).get(key)!r}, recomputed {value!r}")
