// cuBLASLt is loaded on first use, not linked (kernels/cublaslt_lib.h): host code, checked here
// without a device (runs in CI's unit tests wherever the CUDA sources are built).
#include <dlfcn.h>
#include <link.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cublaslt_lib.h"

namespace servelab::kernels {
namespace {

/// The DT_NEEDED entries of this test binary (what the dynamic loader maps before main).
std::vector<std::string> needed_libraries() {
  std::vector<std::string> names;
  void* self = dlopen(nullptr, RTLD_NOW);
  link_map* map = nullptr;
  if (!self || dlinfo(self, RTLD_DI_LINKMAP, &map) != 0 || !map) return names;
  const char* strtab = nullptr;
  for (const ElfW(Dyn)* d = map->l_ld; d->d_tag != DT_NULL; ++d)  // glibc has relocated d_ptr
    if (d->d_tag == DT_STRTAB) strtab = reinterpret_cast<const char*>(d->d_un.d_ptr);
  if (!strtab) return names;
  for (const ElfW(Dyn)* d = map->l_ld; d->d_tag != DT_NULL; ++d)
    if (d->d_tag == DT_NEEDED) names.emplace_back(strtab + d->d_un.d_val);
  return names;
}

TEST(CublasLtLib, TheBinaryDoesNotLinkCublasLt) {
  const auto needed = needed_libraries();
  bool libc = false;
  for (const auto& n : needed) {
    EXPECT_EQ(n.find("cublas"), std::string::npos) << n << " is loaded at start-up";
    libc = libc || n.rfind("libc.so", 0) == 0;
  }
  EXPECT_TRUE(libc) << "the dynamic section was not read (no libc.so among " << needed.size() << " entries)";
}

TEST(CublasLtLib, MissingLibraryErrorNamesItAndEachFileTried) {
  try {
    load_cublaslt({"/nonexistent-a/libcublasLt.so.13", "/nonexistent-b/libcublasLt.so.13"});
    FAIL() << "loaded a library that does not exist";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot load libcublasLt.so."), std::string::npos) << what;
    EXPECT_NE(what.find("/nonexistent-a/libcublasLt.so.13"), std::string::npos) << what;
    EXPECT_NE(what.find("/nonexistent-b/libcublasLt.so.13"), std::string::npos) << what;
    EXPECT_NE(what.find("LD_LIBRARY_PATH"), std::string::npos) << what;
  }
}

TEST(CublasLtLib, ALibraryWithoutTheEntryPointsIsRefusedByName) {
  // libc loads but has none of cuBLASLt's symbols: the first one missing is named.
  try {
    load_cublaslt({"libc.so.6"});
    FAIL() << "took libc for cuBLASLt";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("libc.so.6 has no cublasLtCreate"), std::string::npos) << e.what();
  }
}

TEST(CublasLtLib, CandidatesStartWithTheSonameOfTheHeaders) {
  const auto names = cublaslt_candidates();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
  for (size_t i = 1; i < names.size(); ++i)
    EXPECT_EQ(names[i].substr(names[i].size() - names.front().size()), names.front()) << names[i];
}

TEST(CublasLtLib, LoadsFromTheToolkitWithoutADevice) {
  // The toolkit that built these sources has the library (dlopen needs no driver or device).
  const CublasLt& lt = cublaslt();
  EXPECT_NE(lt.create, nullptr);
  EXPECT_NE(lt.matmul, nullptr);
  EXPECT_EQ(&lt, &cublaslt());  // loaded once
}

}  // namespace
}  // namespace servelab::kernels
