// cuBLASLt loaded with dlopen on first use (cublaslt_lib.h says why).
#include "kernels/cublaslt_lib.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <stdexcept>

#ifndef SERVELAB_CUDA_LIBRARY_DIR
#define SERVELAB_CUDA_LIBRARY_DIR ""
#endif

namespace servelab::kernels {
namespace {

std::string soname() { return "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR); }

std::string folder_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

template <typename F>
void resolve(void* lib, const char* name, F& f, const std::string& file) {
  dlerror();
  void* p = dlsym(lib, name);
  if (!p) {
    const char* why = dlerror();
    throw std::runtime_error("cuBLASLt: " + file + " has no " + name + (why ? std::string(" (") + why + ")" : "") +
                             ": a cuBLASLt older than the headers of the build (" + soname() + ")?");
  }
  f = reinterpret_cast<F>(p);
}

}  // namespace

std::vector<std::string> cublaslt_candidates() {
  std::vector<std::string> names{soname()};
  Dl_info info{};  // the folder of the CUDA runtime this process runs with
  if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &info) != 0 && info.dli_fname) {
    const std::string dir = folder_of(info.dli_fname);
    if (!dir.empty()) names.push_back(dir + soname());
  }
  if (const std::string dir = SERVELAB_CUDA_LIBRARY_DIR; !dir.empty()) names.push_back(dir + "/" + soname());
  return names;
}

CublasLt load_cublaslt(const std::vector<std::string>& candidates) {
  void* lib = nullptr;
  std::string file, tried;
  for (const auto& c : candidates) {
    lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      file = c;
      break;
    }
    const char* why = dlerror();
    tried += "\n  " + c + ": " + (why ? why : "not loaded");
  }
  if (!lib)
    throw std::runtime_error("cuBLASLt: cannot load " + soname() +
                             " (the CUDA toolkit's cuBLASLt, which the cuda backend's matrix products need; "
                             "install it or add its folder to LD_LIBRARY_PATH). Tried:" + tried);
  CublasLt lt;
  resolve(lib, "cublasLtCreate", lt.create, file);
  resolve(lib, "cublasLtDestroy", lt.destroy, file);
  resolve(lib, "cublasLtMatmulDescCreate", lt.matmul_desc_create, file);
  resolve(lib, "cublasLtMatmulDescDestroy", lt.matmul_desc_destroy, file);
  resolve(lib, "cublasLtMatmulDescSetAttribute", lt.matmul_desc_set_attribute, file);
  resolve(lib, "cublasLtMatrixLayoutCreate", lt.matrix_layout_create, file);
  resolve(lib, "cublasLtMatrixLayoutSetAttribute", lt.matrix_layout_set_attribute, file);
  resolve(lib, "cublasLtMatrixLayoutDestroy", lt.matrix_layout_destroy, file);
  resolve(lib, "cublasLtMatmulPreferenceCreate", lt.preference_create, file);
  resolve(lib, "cublasLtMatmulPreferenceDestroy", lt.preference_destroy, file);
  resolve(lib, "cublasLtMatmulPreferenceSetAttribute", lt.preference_set_attribute, file);
  resolve(lib, "cublasLtMatmulAlgoGetHeuristic", lt.algo_get_heuristic, file);
  resolve(lib, "cublasLtMatmulAlgoCheck", lt.algo_check, file);
  resolve(lib, "cublasLtMatmul", lt.matmul, file);
  return lt;  // the library stays loaded for the process's life (its handles may outlive any Gemm)
}

const CublasLt& cublaslt() {
  static const CublasLt lt = load_cublaslt(cublaslt_candidates());  // retried next call if it threw
  return lt;
}

}  // namespace servelab::kernels
