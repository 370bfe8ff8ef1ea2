# Sourced by scripts/test.sh and scripts/sanitize.sh: the sanitizer runtime options (a value already
# in the environment wins) and the ccache settings the presets (CMakePresets.json) need.
#   ASan: leaks (LSan) at every exit, abort on the first report, stack use after return.
#   servelab_asan_cuda BUILD_DIR: adds protect_shadow_gap=0 when BUILD_DIR links the CUDA runtime
#   (cudart maps memory inside ASan's shadow gap; without it a GPU test aborts instead of running or
#   skipping).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
# The presets name ccache as the compiler launcher; without ccache installed, configure with none.
servelab_preset_args=()
command -v ccache > /dev/null || servelab_preset_args=(-DCMAKE_CXX_COMPILER_LAUNCHER=)
# Without a GPU (CI), the GPU test binaries and the CUDA benchmarks would only be compiled, and every
# test in them would skip: leave them out (the CUDA library and backend still compile with nvcc).
# SERVELAB_GPU_TESTS=ON|OFF overrides.
if [ -z "${SERVELAB_GPU_TESTS:-}" ]; then
  if nvidia-smi -L > /dev/null 2>&1; then SERVELAB_GPU_TESTS=ON; else SERVELAB_GPU_TESTS=OFF; fi
fi
servelab_preset_args+=(-DSERVELAB_GPU_TESTS="$SERVELAB_GPU_TESTS")
# Without a GPU the CUDA objects are never run, only compiled: PTX for compute_90a alone
# ("90a-virtual") goes through the same front end and NVVM, Hopper's instructions included, and
# skips ptxas (37% of attention_decode.cu's compile CPU time). With a GPU: sm_90a code, as always.
# SERVELAB_CUDA_ARCHITECTURES overrides.
if [ -z "${SERVELAB_CUDA_ARCHITECTURES:-}" ]; then
  if [ "$SERVELAB_GPU_TESTS" = ON ]; then SERVELAB_CUDA_ARCHITECTURES=90a; else SERVELAB_CUDA_ARCHITECTURES=90a-virtual; fi
fi
servelab_preset_args+=(-DCMAKE_CUDA_ARCHITECTURES="$SERVELAB_CUDA_ARCHITECTURES")
# PTX that nothing runs need not be optimized: NVVM at -O0 (`-Xcicc -O0`) halves nvcc's CPU time
# (attention_decode.cu: 19.9 -> 9.8 CPU-s, 2026-11-29 on the 2-core VM) and still parses, checks
# and lowers every kernel. Only for the compile-only PTX build, never for code a GPU runs.
if [ "$SERVELAB_CUDA_ARCHITECTURES" = 90a-virtual ]; then
  servelab_preset_args+=("-DCMAKE_CUDA_FLAGS=${SERVELAB_CUDA_FLAGS:--Xcicc -O0}")
fi

servelab_asan_cuda() {
  if grep -q '^CMAKE_CUDA_COMPILER:[A-Z]*=/' "$1/CMakeCache.txt" 2> /dev/null; then
    case ":$ASAN_OPTIONS:" in *:protect_shadow_gap=*) ;; *) export ASAN_OPTIONS=$ASAN_OPTIONS:protect_shadow_gap=0 ;; esac
  fi
}
