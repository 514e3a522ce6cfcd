# bench_lib.sh — what the benchmark scripts share (sourced, not run): start
# and stop `specd serve` on a free loopback port, run a measuring child so
# that INT/TERM stop it at once. Needs BIN, TARGET, OUTDIR; SD_BENCH_THREADS
# (optional) is passed as --threads. The caller installs the traps:
#   trap on_exit EXIT
SERVE_PID=""
SERVE_LOG=/dev/null
URL=""

# serve_stop: SIGTERM to the supervisor (it stops its children), SIGKILL to
# whatever is left after 15 s (same logic as tests/e2e/pipeline_lib.sh).
serve_stop() {
  [ -n "$SERVE_PID" ] || return 0
  local kids k i
  kids=$(pgrep -P "$SERVE_PID" 2>/dev/null | tr '\n' ' ')
  kill -TERM "$SERVE_PID" 2>/dev/null
  for i in $(seq 150); do kill -0 "$SERVE_PID" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$SERVE_PID" 2>/dev/null && kill -KILL "$SERVE_PID" 2>/dev/null
  for k in $kids; do kill -KILL "$k" 2>/dev/null; done
  wait "$SERVE_PID" 2>/dev/null
  SERVE_PID=""
}
CHILD=""
# fg CMD...: runs CMD in the background and waits, so that INT/TERM reach the
# traps at once (bash runs traps only after a foreground child ends).
fg() { "$@" & CHILD=$!; wait "$CHILD"; local rc=$?; CHILD=""; return $rc; }
SERVE_PIDS=() # the servers bench_rounds keeps up at once
serve_stop_all() {
  local p
  for p in "${SERVE_PIDS[@]}"; do SERVE_PID=$p; serve_stop; done
  SERVE_PIDS=()
}
on_exit() {
  [ -n "$CHILD" ] && { kill -INT "$CHILD" 2>/dev/null; sleep 0.5; kill -KILL "$CHILD" 2>/dev/null; wait "$CHILD" 2>/dev/null; }
  serve_stop
  serve_stop_all
}

# cpu_snapshot: "NAME MS" per child process of the server — the CPU time (user + system)
# it has spent so far (/proc/PID/stat; nothing where /proc is missing).
cpu_snapshot() {
  local k hz; hz=$(getconf CLK_TCK 2>/dev/null || echo 100)
  for k in $(pgrep -P "$SERVE_PID" 2>/dev/null); do
    [ -r "/proc/$k/stat" ] || continue
    awk -v hz="$hz" -v name="$(cat "/proc/$k/comm")" \
      '{ sub(/^.*\) /, ""); print name, ($12 + $13) * 1000 / hz }' "/proc/$k/stat"
  done
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_drafter: waits (60 s) for the drafter's "drafting with" log line, then
# 1.5 s more so that the verifier's link (probing every 500 ms) sees it.
wait_drafter() {
  local i
  for i in $(seq 600); do
    if grep -q 'drafter info: drafting with' "$SERVE_LOG" 2>/dev/null; then sleep 1.5; return 0; fi
    sleep 0.1
  done
  return 1
}

# serve_start NAME ARGS...: starts specd serve ($SERVE_BIN, default $BIN) on a free port, waits (60 s)
# for /health 200 (and the drafter unless --no-spec); retries on another port
# when the supervisor exits early. Sets SERVE_PID, URL, SERVE_LOG.
serve_start() {
  local name=$1 try i; shift
  local threads=()
  [ -n "${SD_BENCH_THREADS:-}" ] && threads=(--threads "$SD_BENCH_THREADS")
  for try in 1 2 3; do
    local port; port=$(free_port)
    URL=http://127.0.0.1:$port
    SERVE_LOG=$OUTDIR/serve-$name.log
    "${SERVE_BIN:-$BIN}/specd" serve --target "$TARGET" "$@" "${threads[@]}" --host 127.0.0.1 --port "$port" \
      >"$SERVE_LOG" 2>&1 &
    SERVE_PID=$!
    for i in $(seq 600); do
      kill -0 "$SERVE_PID" 2>/dev/null || break
      if [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ]; then
        case " $* " in
          *" --draft-in-verifier "*) return 0 ;;        # the draft model runs in the verifier
          *" --draft "* | *" --ngram-drafter "*) ;;
          *) return 0 ;;                                 # no drafter process
        esac
        wait_drafter && return 0
        echo "bench: the drafter did not start in 60 s; log tail:" >&2; tail -n 20 "$SERVE_LOG" >&2
        serve_stop; return 1
      fi
      sleep 0.1
    done
    if kill -0 "$SERVE_PID" 2>/dev/null; then
      echo "bench: server not healthy in 60 s; log tail:" >&2; tail -n 20 "$SERVE_LOG" >&2
      serve_stop; return 1
    fi
    wait "$SERVE_PID" 2>/dev/null; SERVE_PID=""
    echo "bench: specd serve exited early (try $try)" >&2
  done
  return 1
}


# bench_header TITLE: the run's header — date, host, CPU and its vector
# extensions, git, load — to stdout and $OUTDIR/header.txt.
bench_header() {
  {
    echo "# $1 — $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "# host: $(nproc) CPUs, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n1) ($(grep -o -w 'amx_bf16\|amx_int8\|avx512_bf16\|avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')), git $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?')"
    echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  } | tee "$OUTDIR/header.txt"
}

# bench_rounds NAME: $ROUNDS rounds; in each, for every thread setting of
# $THREAD_SETS ("default" or a count), starts specd serve for every
# configuration of $CONFIGS (arguments from the caller's config_args CFG), all
# at once on their own ports, then runs specd-bench at every $CONCS x $TEMPS
# cell ($TOKENS tokens, cell_requests C requests) against each server in
# turn — the configurations interleaved cell by cell, seconds apart, their
# order rotated from cell to cell, so that a slow spell of a shared machine
# (minutes) hits them alike — scraping /metrics before (.m0) and after (.m1)
# each run into $OUTDIR/CFG-thTH-cC-tT-rR.*. Sets failed=1 on a failure;
# T0 / T1 bracket the run.
bench_rounds() {
  local name=$1 r th cfg args c n t out j cell=0
  failed=0
  T0=$(date +%s)
  for r in $(seq "$ROUNDS"); do
    for th in $THREAD_SETS; do
      if [ "$th" = default ]; then unset SD_BENCH_THREADS; else export SD_BENCH_THREADS=$th; fi
      local up=() urls=()
      for cfg in $CONFIGS; do
        args=$(config_args "$cfg")
        echo "== round $r, threads $th, $cfg: specd serve --target models/tinycode-16m $args" >&2
        # shellcheck disable=SC2086
        local sbin=$BIN
        declare -F config_bin >/dev/null && sbin=$(config_bin "$cfg")
        if ! SERVE_BIN=$sbin serve_start "$cfg-t$th-r$r" $args; then failed=1; continue; fi
        SERVE_PIDS+=("$SERVE_PID")
        SERVE_PID=""
        up+=("$cfg")
        urls+=("$URL")
      done
      for c in $CONCS; do
        n=$(cell_requests "$c")
        for t in $TEMPS; do
          cell=$((cell + 1))
          for j in "${!up[@]}"; do
            local i=$(((j + cell) % ${#up[@]}))
            cfg=${up[$i]}
            URL=${urls[$i]}
            out=$OUTDIR/$cfg-th$th-c$c-t$t-r$r
            curl -s "$URL/metrics" >"$out.m0"
            local cmd=("$BIN/specd-bench" --url "$URL" --num-prompts "$n" --concurrency "$c" --max-tokens "$TOKENS"
                       --temperature "$t" --seed 1 --ignore-eos --warmup 2 --quiet --json "$out.json")
            echo "${cmd[*]}" >"$out.cmd"
            fg "${cmd[@]}" >"$out.txt" 2>"$out.err" || { echo "$name: specd-bench failed, see $out.txt" >&2; failed=1; }
            sleep 1.1 # the router's next health check brings the verifier's figures
            curl -s "$URL/metrics" >"$out.m1"
          done
        done
      done
      serve_stop_all
    done
  done
  T1=$(date +%s)
}
