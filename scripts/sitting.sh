#!/usr/bin/env bash
# Tandem beside llama.cpp and ik_llama.cpp on this machine, in one sitting: the measurement
# behind the CPU engine's targets (docs/benchmarks.md). A round runs every engine once per
# test, one after another, so that the machine's drift between rounds falls on all of them
# alike; the summary gives each round's tokens/s and, per round, Tandem's ratio to each peer
# on the same bits (INT8 to Q8_0, INT4 to Q4_K_M), its prompt speed at 2048 tokens against
# 512, its decode at depth against depth 0, and with several CPU variants (--variants
# amx,avx512) the first variant's speed against the others'.
#
#   scripts/sitting.sh --make DIR [--llama-quantize BIN] [--threads N] [--layers N]
#       writes the 8-layer (or N-layer) Qwen3-30B-A3B-shaped synthetic into DIR: its BF16
#       folder (q30-8l), the INT8 and INT4 folders converted from it (q30-8l-int8,
#       q30-8l-int4), its Q8_0 GGUF file (needs Python with the packages gguf and numpy, or
#       PYTHON=/venv/bin/python) and, with llama.cpp's llama-quantize, its Q4_K_M file. At 8
#       layers about 30 GB; 5 to 15 minutes. What is there already is kept.
#   scripts/sitting.sh DIR [--llama-bench BIN] [--ik-bench BIN] [--rounds N] [--threads N]
#                      [--tests LIST] [--variants LIST] [--repetitions N] [--out FOLDER]
#                      [--int8 MODEL] [--int4 MODEL] [--q8 FILE] [--q4 FILE] [--layers N]
#       the sitting over DIR's files (--layers N: the N-layer synthetic's), or over any
#       model's: --int8 and --int4 what Tandem runs (converted folders, or anything tandem
#       bench -m takes), --q8 and --q4 the GGUF files the peers run (Q8_0 and Q4_K_M); a
#       side whose files are missing is left out.
#       --tests: of pp512, pp2048, tg32 and tg32@d8192 (any ppN, tgN and @dN; default
#       pp512,pp2048,tg32; ik_llama.cpp's llama-bench has no depth). --variants: Tandem's
#       --cpu-variant values to run (default: the best the CPU has). Each engine's run is a
#       process of its own with -r N repetitions (default 2). A peer not given is left out; a
#       run that fails is recorded as such and the sitting goes on. Writes results.tsv, the
#       runs' output (runs.log) and summary.md into --out (default sitting-out/), and prints
#       the summary; memory.tsv holds, for each of Tandem's decode runs, the memory's read
#       rate measured right after it (the round's rate, which the peers beside it saw too)
#       and the run's share of it, which the summary shows under the rates.
#   scripts/sitting.sh --summarize FOLDER
#       the summary again from FOLDER/results.tsv and memory.tsv (of a sitting cut short,
#       or with rows added or removed by hand).
#
# Tandem is build/app/tandem unless TANDEM=/path/to/tandem. ik_llama.cpp runs with its
# run-time repacking, fused MoE and flash attention (-rtr 1 -fmoe 1 -fa 1), as its users
# run it for CPU MoE speed. Build both peers beside Tandem (docs/benchmarks.md, "llama.cpp and
# ik_llama.cpp beside it"); nothing of theirs belongs in this repository.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tandem=${TANDEM:-$root/build/app/tandem}
python=${PYTHON:-python3}

usage() {
  sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

physical_cores() {
  local n
  n=$(lscpu -p=core,socket 2>/dev/null | grep -v '^#' | sort -u | wc -l)
  if [ "${n:-0}" -gt 0 ]; then echo "$n"; else nproc; fi
}

make_files() {
  local dir=$1 quantize=$2 threads=$3 layers=$4
  local base=$dir/q30-${layers}l
  mkdir -p "$dir" || exit 1
  set -e
  [ -d "$base" ] || "$tandem" synth --like qwen3-30b-a3b --layers "$layers" --out "$base"
  local method
  for method in int8 int4; do
    # A folder an earlier Tandem converted in a layout since changed is refused with a
    # sentence naming it: converted again, as that sentence asks.
    if [ -d "$base-$method" ]; then
      local said
      said=$("$tandem" convert --in "$base" --out "$base-$method" --method "$method" \
        -t "$threads" 2>&1 >/dev/null) || true
      if [[ $said == *"written by an earlier Tandem"* ]]; then
        echo "$base-$method: converted by an earlier Tandem; converting it again" >&2
        rm -rf "$base-$method"
      fi
    fi
    [ -d "$base-$method" ] ||
      "$tandem" convert --in "$base" --out "$base-$method" --method "$method" -t "$threads"
  done
  set +e
  if [ ! -f "$base-Q8_0.gguf" ]; then
    if ! "$python" -c 'import gguf, numpy' 2>/dev/null; then
      echo "no GGUF files: $python lacks the packages gguf and numpy (pip install gguf numpy," >&2
      echo "then PYTHON=/that/venv/bin/python $0 --make $dir)" >&2
      return 0
    fi
    "$python" "$root/tests/tools/make_bench_gguf.py" "$base" "$base-Q8_0.gguf.part" &&
      mv "$base-Q8_0.gguf.part" "$base-Q8_0.gguf" || return 1
  fi
  if [ ! -f "$base-Q4_K_M.gguf" ]; then
    if [ -z "$quantize" ]; then
      echo "no Q4_K_M file: give llama.cpp's llama-quantize with --llama-quantize BIN" >&2
      return 0
    fi
    "$quantize" --allow-requantize "$base-Q8_0.gguf" "$base-Q4_K_M.gguf.part" Q4_K_M \
      "$threads" && mv "$base-Q4_K_M.gguf.part" "$base-Q4_K_M.gguf"
  fi
}

# The tokens/s of the row whose test column (the one before the last) is `test`, in a
# markdown table as llama-bench and tandem bench print them ("1018.7 ± 3.2" -> 1018.7).
rate_of() {
  awk -F'|' -v want="$1" '
    NF > 3 {
      test = $(NF - 2); gsub(/^ +| +$/, "", test)
      if (test == want) { split($(NF - 1), v, " "); x = v[1] }
    }
    END { if (x == "") exit 1; print x }'
}

# The summary of a sitting's results.tsv into summary.md beside it: every engine's rates per
# round, then the ratios the targets are stated in.
summarize() {
  awk -F'\t' '
  NR == 1 { next }
  {
    if ($1 + 0 > rounds) rounds = $1 + 0
    # The first variant run (the loop runs them in the order given): "Tandem INT8 amx".
    if (first_variant == "" && $2 ~ /^Tandem INT[0-9]+ /) {
      first_variant = $2; sub(/^Tandem INT[0-9]+ /, "", first_variant)
    }
    key = $2 SUBSEP $3
    rate[$1, key] = $4
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    if (!($3 in test_seen)) { test_seen[$3] = 1; tests[++nt] = $3 }
  }
  function cell(r, k) { return ((r, k) in rate) ? rate[r, k] : "-" }
  function ratio(a, b) {
    if (a == "" || b == "" || a == "-" || b == "-" || a == "failed" || b == "failed" || b + 0 == 0)
      return "-"
    return sprintf("%.2fx", a / b)
  }
  function row(label, k,    r, s) {
    s = "| " label
    for (r = 1; r <= rounds; ++r) s = s " | " cell(r, k)
    print s " |"
  }
  # The heading and table head of the "Against itself" section, before its first row.
  function itself_header() {
    if (!first) return
    print "\n### Against itself\n"; print header " |"; print rule " |"; first = 0
  }
  function ratio_row(label, a, b,    r, s, any, x) {
    s = "| " label
    for (r = 1; r <= rounds; ++r) {
      x = ratio(cell(r, a), cell(r, b)); if (x != "-") any = 1
      s = s " | " x
    }
    if (any) print s " |"
  }
  END {
    header = "| | round 1"
    rule = "| --- | ---"
    for (r = 2; r <= rounds; ++r) { header = header " | round " r; rule = rule " | ---" }
    for (t = 1; t <= nt; ++t) {
      test = tests[t]
      print "\n### " test " (tokens/s)\n"
      print header " |"
      print rule " |"
      for (i = 1; i <= n; ++i) {
        split(order[i], parts, SUBSEP)
        if (parts[2] == test) row(parts[1], order[i])
      }
      for (i = 1; i <= n; ++i) {
        split(order[i], parts, SUBSEP)
        if (parts[2] != test || parts[1] !~ /^Tandem/) continue
        tandem = parts[1]
        peer_fmt = tandem ~ /INT8/ ? "Q8_0" : "Q4_K_M"
        for (j = 1; j <= n; ++j) {
          split(order[j], q, SUBSEP)
          if (q[2] == test && q[1] !~ /^Tandem/ && index(q[1], " " peer_fmt) > 0)
            ratio_row(tandem " / " q[1], order[i], order[j])
        }
        # The first CPU variant against the others (AMX against AVX-512).
        if (first_variant != "" && tandem ~ (" " first_variant "$")) {
          base = tandem; sub(" " first_variant "$", "", base)
          for (j = 1; j <= n; ++j) {
            split(order[j], q, SUBSEP)
            if (q[2] == test && q[1] != tandem && index(q[1], base " ") == 1)
              ratio_row(tandem " / " q[1], order[i], order[j])
          }
        }
      }
    }
    # Against the same engine at the shorter prompt, and at depth 0.
    first = 1
    for (i = 1; i <= n; ++i) {
      split(order[i], parts, SUBSEP)
      if (parts[1] !~ /^Tandem/) continue
      if (parts[2] ~ /^pp[0-9]+$/ && parts[2] != "pp512" && ((parts[1] SUBSEP "pp512") in seen)) {
        itself_header()
        ratio_row(parts[1] " " parts[2] " / pp512", order[i], parts[1] SUBSEP "pp512")
      }
      if (parts[2] ~ /@d/) {
        base = parts[2]; sub(/@d.*/, "", base)
        if ((parts[1] SUBSEP base) in seen) {
          itself_header()
          ratio_row(parts[1] " " parts[2] " / " base, order[i], parts[1] SUBSEP base)
        }
      }
    }
  }' "$1/results.tsv" >"$1/summary.md"
  # Tandem's decode runs against the memory's read rate measured right after them: the rate
  # of the round, which the peers' runs beside them saw too.
  [ -s "$1/memory.tsv" ] || return 0
  awk -F'\t' '
  NR == 1 { next }
  {
    if ($1 + 0 > rounds) rounds = $1 + 0
    key = $2 SUBSEP $3
    rates[$1, key] = $4; share[$1, key] = $5; weights[key] = $6
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    if (!($3 in test_seen)) { test_seen[$3] = 1; tests[++nt] = $3 }
  }
  function cell(table, r, k) { return ((r, k) in table) ? table[r, k] : "-" }
  END {
    header = "| | round 1"
    rule = "| --- | ---"
    for (r = 2; r <= rounds; ++r) { header = header " | round " r; rule = rule " | ---" }
    for (t = 1; t <= nt; ++t) {
      print "\n### " tests[t] ": Tandem against the memory read right after its runs\n"
      print header " |"; print rule " |"
      for (i = 1; i <= n; ++i) {
        split(order[i], parts, SUBSEP)
        if (parts[2] != tests[t]) continue
        s = "| the memory beside " parts[1] ", GB/s"; u = "| " parts[1] "'"'"'s share of it"
        for (r = 1; r <= rounds; ++r) {
          s = s " | " cell(rates, r, order[i]); u = u " | " cell(share, r, order[i])
        }
        print s " |"; print u " |"
      }
      for (i = 1; i <= n; ++i) {
        split(order[i], parts, SUBSEP)
        if (parts[2] == tests[t] && weights[order[i]] != "")
          print "\n" parts[1] " reads " weights[order[i]] " of weights a token."
      }
    }
  }' "$1/memory.tsv" >>"$1/summary.md"
}

[ $# -ge 1 ] || usage
make=0
dir=""
llama_bench=""
ik_bench=""
quantize=""
rounds=3
threads=$(physical_cores)
tests="pp512,pp2048,tg32"
variants=""
reps=2
out=sitting-out
int8="" int4="" q8="" q4=""
layers=8
while [ $# -gt 0 ]; do
  case "$1" in
    --make) make=1 ;;
    --summarize)
      [ -f "$2/results.tsv" ] || { echo "$2/results.tsv is missing" >&2; exit 1; }
      summarize "$2" && cat "$2/summary.md"
      exit $?
      ;;
    --llama-bench) llama_bench=$2; shift ;;
    --ik-bench) ik_bench=$2; shift ;;
    --llama-quantize) quantize=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --threads) threads=$2; shift ;;
    --tests) tests=$2; shift ;;
    --variants) variants=$2; shift ;;
    --repetitions) reps=$2; shift ;;
    --out) out=$2; shift ;;
    --int8) int8=$2; shift ;;
    --int4) int4=$2; shift ;;
    --q8) q8=$2; shift ;;
    --q4) q4=$2; shift ;;
    --layers) layers=$2; shift ;;
    -h | --help) usage ;;
    -*) echo "unknown option $1" >&2; usage ;;
    *) dir=$1 ;;
  esac
  shift
done
[ -n "$dir$int8$int4" ] || usage
if [ ! -x "$tandem" ]; then
  echo "no Tandem binary at $tandem: build it (scripts/build.sh) or set TANDEM" >&2
  exit 1
fi
if [ "$make" = 1 ]; then
  make_files "$dir" "$quantize" "$threads" "$layers"
  exit $?
fi
for peer in "$llama_bench" "$ik_bench"; do
  if [ -n "$peer" ] && [ ! -x "$peer" ]; then
    echo "$peer is not an executable llama-bench" >&2
    exit 1
  fi
done
if [ -n "$dir" ]; then
  : "${int8:=$dir/q30-${layers}l-int8}" "${int4:=$dir/q30-${layers}l-int4}"
  : "${q8:=$dir/q30-${layers}l-Q8_0.gguf}" "${q4:=$dir/q30-${layers}l-Q4_K_M.gguf}"
fi
for m in "$int8" "$int4"; do
  if [ -n "$m" ] && [ ! -e "$m" ]; then
    hint=""
    [ -z "$dir" ] || hint=": write the synthetic model's files first with $0 --make $dir"
    echo "$m is missing$hint" >&2
    exit 1
  fi
done

mkdir -p "$out" || exit 1
results=$out/results.tsv
memory=$out/memory.tsv
log=$out/runs.log
printf 'round\tengine\ttest\ttokens_per_s\n' >"$results"
printf 'round\tengine\ttest\tread_gb_per_s\tshare\tweights_per_token\n' >"$memory"
: >"$log"

# One engine's run of one test; appends its rate (or "failed") to results.tsv.
record() {
  local round=$1 engine=$2 test=$3
  shift 3
  local output rate
  echo "== round $round, $engine, $test: $*" >>"$log"
  output=$("$@" 2>&1)
  echo "$output" >>"$log"
  local shown=${test/@/ @ }
  rate=$(rate_of "$shown" <<<"$output") || rate=failed
  printf '%s\t%s\t%s\t%s\n' "$round" "$engine" "$test" "$rate" >>"$results"
  printf '  %-28s %-14s %s\n' "$engine" "$test" "$rate"
  # Tandem's decode: the memory's rate after each run and the run's share of it (tandem bench's
  # "decode roofline" line), and the weights a token reads.
  if [[ $engine == Tandem* && $test == tg* ]]; then
    local read share weights
    read=$(grep -o 'the memory read [0-9.]*\(-[0-9.]*\)\{0,1\} GB/s' <<<"$output" | head -n1 |
      sed 's/the memory read //; s/ GB\/s//')
    share=$(grep -o 'achieved [0-9]*%' <<<"$output" | head -n1 | sed 's/achieved //')
    weights=$(grep -o 'active weights per token: [0-9.]* MB' <<<"$output" | head -n1 |
      sed 's/active weights per token: //')
    [ -z "$share" ] ||
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$engine" "$test" "${read:--}" "$share" \
        "$weights" >>"$memory"
  fi
}

IFS=, read -r -a test_list <<<"$tests"
for test in "${test_list[@]}"; do
  if ! [[ $test =~ ^(pp|tg)[0-9]+(@d[0-9]+)?$ ]]; then
    echo "unknown test $test (ppN or tgN, with @dN for a depth: pp512,tg32@d8192)" >&2
    exit 2
  fi
done
IFS=, read -r -a variant_list <<<"${variants:-}"
[ ${#variant_list[@]} -gt 0 ] || variant_list=("")
cpu_field() { grep -m1 "^$1" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'; }
amx=no
grep -qw amx_tile /proc/cpuinfo && amx=yes
echo "CPU: $(cpu_field 'model name') (family $(cpu_field 'cpu family'), model $(cpu_field 'model\s')), AMX: $amx; $threads threads"
for ((r = 1; r <= rounds; ++r)); do
  echo "round $r of $rounds ($(date +%T))"
  for test in "${test_list[@]}"; do
    [[ $test =~ ^(pp|tg)([0-9]+)(@d([0-9]+))?$ ]]
    kind=${BASH_REMATCH[1]}
    count=${BASH_REMATCH[2]}
    depth=${BASH_REMATCH[4]:-0}
    if [ "$kind" = pp ]; then p=$count n=0; else p=0 n=$count; fi
    sizes=(-p "$p" -n "$n" -t "$threads" -r "$reps")
    [ "$depth" = 0 ] || sizes+=(-d "$depth")
    for bits in 8 4; do
      if [ $bits = 8 ]; then gguf=$q8 model=$int8 peer_fmt=Q8_0
      else gguf=$q4 model=$int4 peer_fmt=Q4_K_M; fi
      if [ -n "$gguf" ] && [ -f "$gguf" ]; then
        [ -z "$llama_bench" ] ||
          record "$r" "llama.cpp $peer_fmt" "$test" "$llama_bench" -m "$gguf" "${sizes[@]}"
        # ik_llama.cpp's llama-bench measures no depth.
        [ -z "$ik_bench" ] || [ "$depth" != 0 ] ||
          record "$r" "ik_llama.cpp $peer_fmt" "$test" "$ik_bench" -m "$gguf" "${sizes[@]}" \
            -rtr 1 -fmoe 1 -fa 1
      fi
      [ -n "$model" ] || continue
      for v in "${variant_list[@]}"; do
        if [ -n "$v" ]; then
          record "$r" "Tandem INT$bits $v" "$test" "$tandem" --cpu-variant "$v" bench \
            -m "$model" "${sizes[@]}"
        else
          record "$r" "Tandem INT$bits" "$test" "$tandem" bench -m "$model" "${sizes[@]}"
        fi
      done
    done
  done
done

summarize "$out"
echo
cat "$out/summary.md"
