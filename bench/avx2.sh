#!/bin/sh
# Run a command with torch, oneDNN, MKL, NumPy and numba limited to AVX2 (no AVX-512), as on an AVX2-only x86 CPU:
#   bench/avx2.sh .venv/bin/python bench/replay_bench.py --quick
# The cores stay what they are (their caches, clocks and microarchitecture); machine.py records these variables.
export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 NUMBA_CPU_NAME=znver3
export NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR"
exec "$@"
