#!/usr/bin/env bash
# scripts/sitting.sh end to end: Tandem on the demo model beside a stand-in llama-bench that
# prints llama-bench's table with rates the test chose (one of its files fails), two rounds.
# Checks every run's rate as recorded, the summary's ratios against the peer and against
# Tandem's own shorter prompt and depth 0, and that a failed run is shown and left out of the
# ratios instead of stopping the sitting.
# Usage: test_sitting.sh TANDEM
set -euo pipefail
tandem=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# llama-bench's markdown table: pp tests at 100 (plus the prompt length over 1000), tg at 10,
# at depth 5; a file named broken.gguf fails as a missing file does.
cat >"$work/fake-bench" <<'FAKE'
#!/usr/bin/env bash
p=512 n=128 d=0 m=""
while [ $# -gt 0 ]; do
  case "$1" in
    -p) p=$2; shift ;;
    -n) n=$2; shift ;;
    -d) d=$2; shift ;;
    -m) m=$2; shift ;;
  esac
  shift
done
case "$m" in *broken.gguf) echo "error: failed to load model '$m'" >&2; exit 1 ;; esac
echo "| model | size | params | backend | threads | test | t/s |"
echo "| ----- | ---: | -----: | ------- | ------: | ---: | --: |"
at=""
[ "$d" = 0 ] || at=" @ d$d"
if [ "$p" != 0 ]; then
  echo "| fake 8B Q8_0 | 1 GiB | 8 B | CPU | 2 | pp$p$at | $((100 + p / 1000)).00 ± 1.50 |"
fi
if [ "$n" != 0 ]; then
  rate=10.00
  [ "$d" = 0 ] || rate=5.00
  echo "| fake 8B Q8_0 | 1 GiB | 8 B | CPU | 2 | tg$n$at | $rate ± 0.25 |"
fi
FAKE
chmod +x "$work/fake-bench"
touch "$work/model-Q8_0.gguf" "$work/broken.gguf"
demo=$root/resources/demo-model

TANDEM=$tandem "$root/scripts/sitting.sh" --int8 "$demo" --int4 "$demo" \
  --q8 "$work/model-Q8_0.gguf" --q4 "$work/broken.gguf" --llama-bench "$work/fake-bench" \
  --tests pp512,pp1024,tg4,tg4@d64 --rounds 2 --repetitions 1 --threads 2 \
  --out "$work/out" >"$work/stdout" 2>&1 || {
  cat "$work/stdout" >&2
  fail "the sitting exited with $?"
}
results=$work/out/results.tsv
summary=$work/out/summary.md
if [ ! -f "$results" ] || [ ! -f "$summary" ]; then fail "no results.tsv or summary.md"; fi

# Two rounds of four tests by four engines, the peer's INT4 file failing every time.
rows=$(tail -n +2 "$results" | wc -l)
[ "$rows" = 32 ] || fail "$rows results, not 32"
failed=$(awk -F'\t' '$4 == "failed"' "$results" | wc -l)
[ "$failed" = 8 ] || fail "$failed failed runs, not the broken file's 8"
awk -F'\t' '$4 == "failed" && $2 != "llama.cpp Q4_K_M" { exit 1 }' "$results" ||
  fail "a run other than the broken file's failed: $(grep failed "$results")"
expect() { # round engine test rate
  awk -F'\t' -v r="$1" -v e="$2" -v t="$3" -v x="$4" \
    '$1 == r && $2 == e && $3 == t { found = 1; if ($4 != x) exit 1 } END { exit !found }' \
    "$results" || fail "round $1, $2, $3: not $4 in $(grep -F "$2" "$results" | grep -F "$3")"
}
for r in 1 2; do
  expect "$r" "llama.cpp Q8_0" pp512 100.00
  expect "$r" "llama.cpp Q8_0" pp1024 101.00
  expect "$r" "llama.cpp Q8_0" tg4 10.00
  expect "$r" "llama.cpp Q8_0" tg4@d64 5.00
done
# Tandem's own rates are real numbers.
awk -F'\t' 'NR > 1 && $2 ~ /^Tandem/ && !($4 + 0 > 0) { exit 1 }' "$results" ||
  fail "a Tandem run has no rate: $(grep Tandem "$results")"

# The summary's ratios, recomputed from the recorded rates.
rate() { awk -F'\t' -v r="$1" -v e="$2" -v t="$3" '$1 == r && $2 == e && $3 == t { print $4 }' "$results"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
row() { grep -F "| $1 |" "$summary" || fail "no row \"$1\" in the summary: $(cat "$summary")"; }
for test in pp512 pp1024 tg4 tg4@d64; do
  want="| Tandem INT8 / llama.cpp Q8_0 | $(ratio "$(rate 1 "Tandem INT8" $test)" "$(rate 1 "llama.cpp Q8_0" $test)") | $(ratio "$(rate 2 "Tandem INT8" $test)" "$(rate 2 "llama.cpp Q8_0" $test)") |"
  section=$(awk -v t="### $test (tokens/s)" '$0 == t { on = 1; next } /^### / { on = 0 } on' "$summary")
  grep -qxF "$want" <<<"$section" || fail "$test: no line $want in: $section"
  grep -q "Tandem INT4 / llama.cpp Q4_K_M" <<<"$section" &&
    fail "$test: a ratio against the failed runs: $section"
  grep -qF "| llama.cpp Q4_K_M | failed | failed |" <<<"$section" ||
    fail "$test: the failed runs are not shown: $section"
done
want="| Tandem INT4 pp1024 / pp512 | $(ratio "$(rate 1 "Tandem INT4" pp1024)" "$(rate 1 "Tandem INT4" pp512)") | $(ratio "$(rate 2 "Tandem INT4" pp1024)" "$(rate 2 "Tandem INT4" pp512)") |"
[ "$(row "Tandem INT4 pp1024 / pp512")" = "$want" ] || fail "not $want: $(row "Tandem INT4 pp1024 / pp512")"
want="| Tandem INT8 tg4@d64 / tg4 | $(ratio "$(rate 1 "Tandem INT8" tg4@d64)" "$(rate 1 "Tandem INT8" tg4)") | $(ratio "$(rate 2 "Tandem INT8" tg4@d64)" "$(rate 2 "Tandem INT8" tg4)") |"
[ "$(row "Tandem INT8 tg4@d64 / tg4")" = "$want" ] || fail "not $want: $(row "Tandem INT8 tg4@d64 / tg4")"
# Each of Tandem's decode runs with the memory's rate right after it and its share of it,
# shown under the rates.
memory=$work/out/memory.tsv
[ -f "$memory" ] || fail "no memory.tsv"
rows=$(tail -n +2 "$memory" | wc -l)
[ "$rows" = 8 ] || fail "$rows rows in memory.tsv, not 8 (two decode tests, two formats, two rounds)"
awk -F'\t' 'NR > 1 && !($2 ~ /^Tandem INT[48]$/ && $3 ~ /^tg4/ && $4 ~ /^[0-9.]+(-[0-9.]+)?$/ &&
  $5 ~ /^[0-9]+%$/ && $6 ~ / MB$/) { exit 1 }' "$memory" || fail "memory.tsv: $(cat "$memory")"
share() { awk -F'\t' -v r="$1" -v e="$2" -v t="$3" '$1 == r && $2 == e && $3 == t { print $5 }' "$memory"; }
section=$(awk '$0 == "### tg4@d64: Tandem against the memory read right after its runs" { on = 1; next }
  /^### / { on = 0 } on' "$summary")
want="| Tandem INT4's share of it | $(share 1 "Tandem INT4" tg4@d64) | $(share 2 "Tandem INT4" tg4@d64) |"
grep -qxF "$want" <<<"$section" || fail "no line $want in: $section"
grep -q "^Tandem INT8 reads [0-9.]* MB of weights a token.$" <<<"$section" ||
  fail "the weights a token reads are not named: $section"
tail -n "$(wc -l <"$summary")" "$work/stdout" | diff -q - "$summary" >/dev/null ||
  fail "the summary was not printed last: $(cat "$work/stdout")"

# Several CPU variants: each run under its own name, and the first against the others.
TANDEM=$tandem "$root/scripts/sitting.sh" --int8 "$demo" --tests pp512 --rounds 1 \
  --repetitions 1 --threads 2 --variants avx2,scalar --out "$work/variants" >/dev/null 2>&1 ||
  fail "the sitting with two variants exited with $?"
results=$work/variants/results.tsv
for v in avx2 scalar; do
  grep -qP "^1\tTandem INT8 $v\tpp512\t[0-9.]+$" "$results" || fail "no $v run: $(cat "$results")"
done
want="| Tandem INT8 avx2 / Tandem INT8 scalar | $(ratio "$(rate 1 "Tandem INT8 avx2" pp512)" "$(rate 1 "Tandem INT8 scalar" pp512)") |"
grep -qxF "$want" "$work/variants/summary.md" || fail "no line $want in $(cat "$work/variants/summary.md")"
# --summarize writes the same summary again from the results, the memory's rates too.
for folder in "$work/variants" "$work/out"; do
  cp "$folder/summary.md" "$work/summary-before.md"
  rm "$folder/summary.md"
  "$root/scripts/sitting.sh" --summarize "$folder" >/dev/null || fail "--summarize exited with $?"
  cmp -s "$work/summary-before.md" "$folder/summary.md" ||
    fail "--summarize wrote another summary of $folder"
done

# Refusals: an unknown test, and a missing model.
if TANDEM=$tandem "$root/scripts/sitting.sh" --int8 "$demo" --tests pp512,xx9 --rounds 1 \
  --out "$work/out2" >"$work/refused" 2>&1; then
  fail "an unknown test was taken"
fi
grep -q "unknown test xx9" "$work/refused" || fail "unknown test: $(cat "$work/refused")"
if TANDEM=$tandem "$root/scripts/sitting.sh" --int8 "$work/nothing" --out "$work/out3" \
  >"$work/refused" 2>&1; then
  fail "a missing model was taken"
fi
grep -q "$work/nothing is missing" "$work/refused" || fail "missing model: $(cat "$work/refused")"
echo "sitting.sh: all checks passed"
