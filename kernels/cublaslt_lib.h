#pragma once
// cuBLASLt, loaded on first use (dlopen) instead of linked: libcublasLt is ~540 MB, and a process
// that links it pays its load at start-up whether or not it ever multiplies a matrix (under
// ASan+LSan ~0.17 CPU-s per process: every test process and every CLI run with a CUDA build).
// Only Gemm (gemm.cu) and LoraGemm (lora_gemm.cu) call cuBLASLt; each loads the library in its constructor.
#include <cublasLt.h>

#include <string>
#include <vector>

namespace servelab::kernels {

/// The cuBLASLt entry points Gemm uses, resolved from one loaded libcublasLt.
struct CublasLt {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtMatmulDescCreate) matmul_desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) matmul_desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) matmul_desc_set_attribute = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) matrix_layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) matrix_layout_set_attribute = nullptr;  // LoraGemm's batches
  decltype(&cublasLtMatrixLayoutDestroy) matrix_layout_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set_attribute = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic = nullptr;
  decltype(&cublasLtMatmulAlgoCheck) algo_check = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

/// The file names tried, in order, to load cuBLASLt: its soname (libcublasLt.so.<the headers'
/// major version>: LD_LIBRARY_PATH, the binary's run path, the loader's cache), then that name in
/// the folder of the loaded CUDA runtime, then in the toolkit's library folder of the build.
std::vector<std::string> cublaslt_candidates();

/// Loads cuBLASLt from the first of `candidates` that dlopen takes and resolves every entry point.
/// Throws std::runtime_error naming the library, each file tried and dlerror's reason when none
/// loads or a symbol is missing.
CublasLt load_cublaslt(const std::vector<std::string>& candidates);

/// cuBLASLt from cublaslt_candidates(), loaded once per process on the first call (thread-safe);
/// throws as load_cublaslt (and again on each later call) when it cannot be loaded.
const CublasLt& cublaslt();

}  // namespace servelab::kernels
