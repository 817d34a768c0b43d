#!/usr/bin/env bash
# No file of the kernels library built for one instruction set (AVX2, AVX-VNNI, AVX-512, AMX)
# may hold its own copy of the standard library's template code: the linker keeps one copy of
# each, maybe that one, and every CPU would run it (a Zen 3 stopped on AVX-512 instructions in
# std::vector::resize). Those files include kernels/cpu/baseline_std.h first, which points
# them to baseline_std.cpp's copies; a container of a type not listed there shows up here.
# Only symbols the linker shares count: a file's local copies (GCC's partial inlining makes
# "[clone .part.0]" ones) are called by that file's own code alone.
#
#   test_variant_std_code.sh LIBRARY
set -euo pipefail
library=$1
command -v nm > /dev/null || { echo "nm (binutils) is needed to read $library"; exit 1; }
listing=$(nm -C --defined-only "$library" 2> /dev/null)
[ -n "$listing" ] || { echo "no symbols read from $library"; exit 1; }
found=$(awk '
  /\.o:$/ { member = $0; variant = member ~ /(avx2|avx512|avxvnni|_amx)[^\/]*\.o:$/; next }
  variant && / [TWV] (std|__gnu_cxx)::/ { sub(/^[0-9a-f]+ [TWV] /, ""); print member " " $0 }
' <<< "$listing")
variants=$(grep -cE '(avx2|avx512|avxvnni|_amx)[^/]*\.o:$' <<< "$listing" || true)
[ "$variants" -gt 0 ] || { echo "no variant file found in $library"; exit 1; }
if [ -n "$found" ]; then
  echo "standard library code compiled into variant files (list its type in baseline_std.h):"
  cut -c1-300 <<< "$found" | sort -u
  exit 1
fi
echo "no standard library code in the $variants variant files of $library"
