#!/usr/bin/env bash
# Build llama.cpp's real `llama-server` (C++) from the llama.cpp source vendored in the
# llama-cpp-python sdist on PyPI, create a tiny Qwen3-architecture model locally (no hub),
# convert it with llama.cpp's own convert_hf_to_gguf.py and serve it on 127.0.0.1.
#
#   WORK=/some/cache/dir PORT=8102 bash setup_llama_server.sh      # builds (once) + starts
#   kill "$(cat "$WORK/llama-server.pid")"                          # stop
#
# Needs: python3 (3.11), gcc/g++, cmake (>=3.21), PyPI access. Every step is skipped when its
# output already exists, so keep $WORK between CI runs if you can (the C++ build is the slow part).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="${WORK:-$HOME/.cache/anvil-realserver}"
PORT="${PORT:-8102}"
CTX="${CTX:-131072}"          # total KV cells (shared by all slots with --kv-unified)
SLOTS="${SLOTS:-4}"           # concurrent sequences decoded in one batch
N_PREDICT="${N_PREDICT:-1024}" # server-side cap when a request has no max_tokens (model never emits EOS)
LCP_VERSION="${LCP_VERSION:-0.3.36}"
JOBS="${JOBS:-$(nproc)}"
THREADS="${THREADS:-1}"      # 1 is faster and far steadier than 2 when a load generator shares the 2 cores
mkdir -p "$WORK"
t0=$(date +%s)
log() { echo "[setup_llama_server +$(( $(date +%s) - t0 ))s] $*"; }

# 1) python env for model creation + GGUF conversion (torch CPU wheel is pinned so no CUDA download)
if [ ! -x "$WORK/venv/bin/python" ]; then python3 -m venv "$WORK/venv"; fi
if ! "$WORK/venv/bin/python" -c 'import torch, transformers, tokenizers, safetensors' 2>/dev/null; then
  log "pip install torch==2.13.0 transformers tokenizers"
  "$WORK/venv/bin/pip" install -q torch==2.13.0 'transformers==5.24.0' tokenizers safetensors numpy
fi
PY="$WORK/venv/bin/python"

# 2) llama.cpp source from the llama-cpp-python sdist (PyPI)
SRC="$WORK/llama.cpp"
if [ ! -f "$SRC/CMakeLists.txt" ]; then
  log "downloading llama-cpp-python==$LCP_VERSION sdist"
  "$WORK/venv/bin/pip" download -q --no-deps --no-binary :all: "llama-cpp-python==$LCP_VERSION" -d "$WORK/dl"
  tar -xzf "$WORK/dl/llama_cpp_python-$LCP_VERSION.tar.gz" -C "$WORK/dl"
  mv "$WORK/dl/llama_cpp_python-$LCP_VERSION/vendor/llama.cpp" "$SRC"
fi

# 3) build only the llama-server target (UI assets off: they would be downloaded from the hub)
BIN="$SRC/build/bin/llama-server"
if [ ! -x "$BIN" ]; then
  GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
  log "cmake configure"
  cmake -S "$SRC" -B "$SRC/build" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF >"$WORK/cmake.log" 2>&1
  log "building llama-server with $JOBS jobs (slow: ~210 compile steps)"
  cmake --build "$SRC/build" --target llama-server -j "$JOBS" >"$WORK/build.log" 2>&1
fi

# 4) tiny model (HF folder) + GGUF
MODEL="$WORK/tiny-qwen3"; GGUF="$WORK/tiny-qwen3.gguf"
if [ ! -f "$MODEL/model.safetensors" ]; then
  log "creating tiny model"; "$PY" "$HERE/make_tiny_model.py" "$MODEL" >"$WORK/make_model.log" 2>&1
fi
if [ ! -f "$GGUF" ]; then
  log "converting to GGUF"; "$PY" "$HERE/hf_to_gguf.py" "$SRC" "$MODEL" "$GGUF" --outtype f32 >"$WORK/convert.log" 2>&1
fi

# 5) start the server on loopback only
if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
  log "port $PORT already answers /health: stop what runs there or pick another PORT"; exit 1
fi
log "starting llama-server on 127.0.0.1:$PORT"
nohup "$BIN" -m "$GGUF" --host 127.0.0.1 --port "$PORT" --alias tiny-qwen3 \
  --jinja --reasoning-format deepseek -c "$CTX" -np "$SLOTS" --kv-unified -n "$N_PREDICT" \
  -t "$THREADS" --no-webui --metrics >"$WORK/llama-server.log" 2>&1 &
echo $! >"$WORK/llama-server.pid"
for _ in $(seq 1 240); do
  if kill -0 "$(cat "$WORK/llama-server.pid")" 2>/dev/null && curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then log "ready (pid $(cat "$WORK/llama-server.pid"))"; exit 0; fi
  if ! kill -0 "$(cat "$WORK/llama-server.pid")" 2>/dev/null; then tail -30 "$WORK/llama-server.log"; exit 1; fi
  sleep 0.5
done
log "server did not become healthy"; tail -30 "$WORK/llama-server.log"; exit 1
