#!/usr/bin/env bash
# Serve a locally created tiny Qwen3-architecture model with Hugging Face `transformers serve`
# (transformers 5.x, FastAPI/uvicorn) on 127.0.0.1 — OpenAI-compatible streaming chat completions.
#
#   WORK=/some/dir PORT=8101 bash setup_tf_serve.sh          # CB=1 adds --continuous-batching
#   kill "$(cat "$WORK/tf-serve.pid")"                         # stop
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="${WORK:-$HOME/.cache/anvil-realserver}"
PORT="${PORT:-8101}"
mkdir -p "$WORK"
t0=$(date +%s)
log() { echo "[setup_tf_serve +$(( $(date +%s) - t0 ))s] $*"; }

if [ ! -x "$WORK/venv/bin/python" ]; then python3 -m venv "$WORK/venv"; fi
if ! "$WORK/venv/bin/python" -c 'import torch, transformers, fastapi, uvicorn, openai' 2>/dev/null; then
  log "pip install torch==2.13.0 transformers[serving]"
  "$WORK/venv/bin/pip" install -q torch==2.13.0 'transformers[serving]==5.24.0' tokenizers
fi
MODEL="$WORK/tiny-qwen3"
if [ ! -f "$MODEL/model.safetensors" ]; then
  log "creating tiny model"; "$WORK/venv/bin/python" "$HERE/make_tiny_model.py" "$MODEL" >"$WORK/make_model.log" 2>&1
fi
EXTRA=(); [ "${CB:-0}" = 1 ] && EXTRA=(--continuous-batching)
if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
  log "port $PORT already answers /health: stop what runs there or pick another PORT"; exit 1
fi
log "starting transformers serve on 127.0.0.1:$PORT"
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 nohup "$WORK/venv/bin/transformers" serve "${EXTRA[@]}" \
  --host 127.0.0.1 --port "$PORT" --device cpu --log-level warning "$MODEL" >"$WORK/tf-serve.log" 2>&1 &
echo $! >"$WORK/tf-serve.pid"
for _ in $(seq 1 360); do
  if kill -0 "$(cat "$WORK/tf-serve.pid")" 2>/dev/null && curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then log "ready (pid $(cat "$WORK/tf-serve.pid")), model id: $MODEL"; exit 0; fi
  if ! kill -0 "$(cat "$WORK/tf-serve.pid")" 2>/dev/null; then tail -30 "$WORK/tf-serve.log"; exit 1; fi
  sleep 0.5
done
log "server did not become healthy"; tail -30 "$WORK/tf-serve.log"; exit 1
