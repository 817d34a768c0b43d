#!/usr/bin/env bash
# The kernels library must hold no lambda of the target_clones code paths out of line: the
# body of a lambda inside a target_clones function is compiled for the default target (SSE2)
# whatever clone calls it, and the Portable attention ran at a twentieth of its speed that way
# (kernels/cpu/attention/loop.h, with_count). Those paths are the Portable kernels and the
# fp32 cache's (the *Portable and Fp32Kv kernel types); their lambdas are always_inline.
#
#   test_clone_lambdas.sh LIBRARY
set -euo pipefail
library=$1
command -v nm > /dev/null || { echo "nm (binutils) is needed to read $library"; exit 1; }
symbols=$(nm -C --defined-only "$library" 2> /dev/null)
[ -n "$symbols" ] || { echo "no symbols read from $library"; exit 1; }
found=$(grep -E ' [TtWw] ' <<< "$symbols" | grep 'lambda' | grep -E 'Portable|Fp32Kv' || true)
if [ -n "$found" ]; then
  echo "lambdas of the target_clones kernels compiled out of line (mark them always_inline):"
  sed -E 's/^[0-9a-f]+ [TtWw] //' <<< "$found" | cut -c1-300 | sort -u
  exit 1
fi
echo "no out-of-line lambda in the target_clones kernels of $library"
