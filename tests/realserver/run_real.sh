#!/usr/bin/env bash
# make test-real SERVER=transformers|vllm|llama
# Sets the real server up (cached under $ANVIL_REALSERVER_WORK, default ~/.cache/anvil-realserver),
# starts it on 127.0.0.1, runs tests/realserver/test_real_servers.py against it, stops it by PID.
# Budgets (wall clock, after set-up): transformers 10 min, vllm 20 min, llama 15 min.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
SERVER="${1:-}"
export WORK="${ANVIL_REALSERVER_WORK:-$HOME/.cache/anvil-realserver}"
case "$SERVER" in
  transformers) SETUP=setup_tf_serve.sh; PIDFILE=tf-serve.pid; PORT=${PORT:-8101}
                MODEL="$WORK/tiny-qwen3"; BUDGET=600 ;;
  vllm)         SETUP=setup_vllm_cpu.sh; PIDFILE=vllm.pid; PORT=${PORT:-8104}
                MODEL=tiny-qwen3; BUDGET=1200
                VISION_PORT=${VISION_PORT-8124} ;;  # and the tiny Qwen2-VL (VISION_PORT= : not)
  llama)        SETUP=setup_llama_server.sh; PIDFILE=llama-server.pid; PORT=${PORT:-8102}
                MODEL=tiny-qwen3; BUDGET=900 ;;
  *) echo "make test-real: SERVER must be one of transformers, vllm, llama (got '${SERVER}')" >&2
     exit 2 ;;
esac
export PORT
stop_one() {  # only a server this script starts: its pid file ($1), its port ($2) on its command line
  if [ -f "$WORK/$1" ]; then
    pid="$(cat "$WORK/$1")"
    if ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "--port $2"; then
      rm -f "$WORK/$1"  # gone, or another process now: not ours to kill
      return 0
    fi
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$WORK/$1"
  fi
}
stop() {
  stop_one "$PIDFILE" "$PORT"
  if [ -n "${VISION_PORT:-}" ]; then stop_one vllm-vision.pid "$VISION_PORT"; fi
}
trap stop EXIT
stop  # a server left by an interrupted run would hold the port
t0=$(date +%s)
bash "$HERE/$SETUP"
VISION_URL=""
if [ -n "${VISION_PORT:-}" ]; then
  PORT="$VISION_PORT" bash "$HERE/setup_vllm_vision.sh"; VISION_URL="http://127.0.0.1:$VISION_PORT"
fi
echo "[test-real] $SERVER set up and started in $(( $(date +%s) - t0 )) s"
ANVIL_REAL_SERVER="$SERVER" ANVIL_REAL_URL="http://127.0.0.1:$PORT" ANVIL_REAL_MODEL="$MODEL" \
ANVIL_REAL_LOG="$WORK/${PIDFILE%.pid}.log" ANVIL_REAL_VISION_URL="$VISION_URL" \
  timeout "$BUDGET" "$ROOT/.venv/bin/python" -m pytest -m real -s -p no:cacheprovider \
  "$ROOT/tests/realserver/test_real_servers.py" "$ROOT/tests/realserver/test_real_checks.py"
echo "[test-real] $SERVER done in $(( $(date +%s) - t0 )) s"
