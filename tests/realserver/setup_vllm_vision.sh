#!/usr/bin/env bash
# Serve the locally created tiny Qwen2-VL model (make_tiny_vlm.py) with vLLM's CPU backend on
# 127.0.0.1, for images as load against a real vision tokenizer. Reuses setup_vllm_cpu.sh's venv.
#
#   WORK=/some/dir PORT=8124 bash setup_vllm_vision.sh
#   kill "$(cat "$WORK/vllm-vision.pid")"
#
# Qwen2-VL's processor in transformers 5 needs torchvision importable (its video processor),
# and the only torchvision wheels reachable here are CUDA builds whose C ops do not load
# against the CPU torch. The image path uses none of those ops (PIL decodes, torch resizes),
# so a copy of the wheel goes to $WORK/torchvision-py (never into the shared venv), its
# fake-op registrations skipped when the ops are absent, and only this server sees it.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="${WORK:-$HOME/.cache/anvil-realserver}"
PORT="${PORT:-8124}"
V="${VLLM_VENV:-$WORK/venv-vllm}"
mkdir -p "$WORK"
t0=$(date +%s)
log() { echo "[setup_vllm_vision +$(( $(date +%s) - t0 ))s] $*"; }
if ! "$V/bin/python" -c 'import vllm' 2>/dev/null; then
  log "no vLLM in $V: run setup_vllm_cpu.sh first (or set VLLM_VENV)"; exit 1
fi
TV="$WORK/torchvision-py"
if [ ! -f "$TV/.patched" ]; then
  tvver="$("$V/bin/python" -c 'import torch; v=torch.__version__.split("+")[0].split("."); print(f"0.{int(v[1])+15}.0")')"
  log "torchvision $tvver (pure-Python parts only) into $TV"
  rm -rf "$TV"; "$V/bin/pip" install -q --no-deps --target "$TV" "torchvision==$tvver"
  sed -i 's/^@torch.library.register_fake(\(.*\))$/@(torch.library.register_fake(\1) if torchvision.extension._has_ops() else (lambda f: f))/' \
    "$TV/torchvision/_meta_registrations.py"
  PYTHONPATH="$TV" "$V/bin/python" -c 'import torchvision.transforms.v2.functional' && touch "$TV/.patched"
fi
MODEL="$WORK/tiny-qwen2vl"
if [ ! -f "$MODEL/model.safetensors" ]; then
  log "creating tiny VLM"; "$V/bin/python" "$HERE/make_tiny_vlm.py" "$MODEL" >"$WORK/make_vlm.log" 2>&1
fi
if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
  log "port $PORT already answers /health: stop what runs there or pick another PORT"; exit 1
fi
log "starting vLLM (vision) on 127.0.0.1:$PORT"
PYTHONPATH="$TV" VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-2}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
nohup "$V/bin/python" -m vllm.entrypoints.openai.api_server --model "$MODEL" \
  --served-model-name tiny-qwen2vl --host 127.0.0.1 --port "$PORT" --dtype float32 \
  --max-model-len 8192 --enforce-eager --limit-mm-per-prompt '{"image": 4, "video": 0}' \
  --max-num-seqs "${MAX_NUM_SEQS:-8}" ${VLLM_EXTRA:-} >"$WORK/vllm-vision.log" 2>&1 &
echo $! >"$WORK/vllm-vision.pid"
for _ in $(seq 1 600); do
  if kill -0 "$(cat "$WORK/vllm-vision.pid")" 2>/dev/null && curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then log "ready (pid $(cat "$WORK/vllm-vision.pid"))"; exit 0; fi
  if ! kill -0 "$(cat "$WORK/vllm-vision.pid")" 2>/dev/null; then tail -30 "$WORK/vllm-vision.log"; exit 1; fi
  sleep 1
done
log "server did not become healthy"; tail -30 "$WORK/vllm-vision.log"; exit 1
