// step_probe: times a few step shapes of a preset on the cuda backend (random weights, the paged
// arena `servelab profile` uses), interleaved, and optionally runs one of them once between
// cudaProfilerStart and cudaProfilerStop for `ncu --profile-from-start off`: a per-kernel breakdown
// of one mixed step against its chunk alone (issue 28: a chunk's cost with and without decodes
// beside it; results/sim-validation/mixed-2026-11-30/).
//
//   step_probe PRESET CONTEXT POINTS [REPEATS [MODES [NCU_POINT]]]
//
// POINTS: comma-separated CHUNK:DECODES, e.g. 501:0,501:2,512:0 — a chunk of CHUNK rows starting at
// CONTEXT beside DECODES one-row decodes at CONTEXT (CHUNK 0: decodes only). MODES: comma-separated
// mixed-decode modes, one backend each (CudaBackendOptions::mixed_decodes: auto, prefill, decode;
// default auto). Each point is run REPEATS times (default 15) on each backend, in rounds, point
// after point, and its median printed. NCU_POINT (an index into POINTS) is then run once on the
// first mode's backend inside the profiler range.
#include <cuda_profiler_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/profiler.h"
#include "engine/model/config.h"
#include "kernels/cuda_check.h"

using namespace servelab;

namespace {

ProfilePoint make_point(int context, int chunk, int decodes) {
  ProfilePoint p;
  p.phase = chunk == 0 ? ProfilePhase::decode : decodes == 0 ? ProfilePhase::chunk : ProfilePhase::mixed;
  p.seqs.assign(size_t(decodes), ProfilePoint::Seq{context, 1});
  if (chunk > 0) p.seqs.push_back({context, chunk});
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: step_probe PRESET CONTEXT CHUNK:DECODES[,...] [REPEATS [MODES [NCU_POINT]]]\n");
    return 2;
  }
  try {
    ModelConfig model = preset(argv[1]);
    model.dtype = DType::bf16;
    const int context = std::atoi(argv[2]);
    std::vector<ProfilePoint> points;
    std::vector<std::string> names;
    std::stringstream list(argv[3]);
    for (std::string item; std::getline(list, item, ',');) {
      const size_t colon = item.find(':');
      if (colon == std::string::npos) throw std::invalid_argument("point '" + item + "' is not CHUNK:DECODES");
      const int chunk = std::stoi(item.substr(0, colon)), decodes = std::stoi(item.substr(colon + 1));
      if (chunk < 0 || decodes < 0 || chunk + decodes == 0) throw std::invalid_argument("point '" + item + "' is empty");
      points.push_back(make_point(context, chunk, decodes));
      names.push_back(item);
    }
    const int repeats = argc > 4 ? std::atoi(argv[4]) : 15;
    using MD = cuda::MixedDecodes;
    std::vector<std::pair<std::string, MD>> modes;
    std::stringstream mode_list(argc > 5 ? argv[5] : "auto");
    for (std::string m; std::getline(mode_list, m, ',');) {
      const size_t before = modes.size();
      for (MD md : {MD::auto_select, MD::prefill_kernel, MD::decode_kernel})
        if (m == cuda::to_string(md)) modes.emplace_back(m, md);
      if (modes.size() == before) throw std::invalid_argument("mode '" + m + "' is not auto, prefill or decode");
    }
    if (modes.empty()) throw std::invalid_argument("no MODES");
    const int ncu_point = argc > 6 ? std::atoi(argv[6]) : -1;
    if (ncu_point >= int(points.size())) throw std::invalid_argument("NCU_POINT is past the points");
    int64_t n_slots = 0;
    int max_len = 1;
    for (const ProfilePoint& p : points) {
      n_slots = std::max(n_slots, p.n_slots());
      max_len = std::max(max_len, p.max_len());
    }
    std::vector<std::unique_ptr<CudaBackend>> backends;
    std::vector<std::unique_ptr<ProfileRunner>> runners;
    for (const auto& [name, md] : modes) {
      backends.push_back(CudaBackend::random(model, 1, CudaBackendOptions{.mixed_decodes = md}));
      runners.push_back(std::make_unique<ProfileRunner>(*backends.back(), n_slots, max_len, 7, true));
    }
    std::vector<std::vector<std::vector<double>>> ms(modes.size(), std::vector<std::vector<double>>(points.size()));
    for (auto& runner : runners)
      for (const ProfilePoint& p : points) runner->run(p, 3, 1, 0.0);  // warm-up
    for (int r = 0; r < repeats; ++r)
      for (size_t i = 0; i < points.size(); ++i)
        for (size_t m = 0; m < modes.size(); ++m) ms[m][i].push_back(runners[m]->run(points[i], 0, 1, 0.0).step_s * 1e3);
    std::printf("%s on %s, context %d, %d rounds (median ms, min, max):\n", model.name.c_str(),
                cuda_device_description(0).c_str(), context, repeats);
    for (size_t i = 0; i < points.size(); ++i)
      for (size_t m = 0; m < modes.size(); ++m) {
        std::vector<double>& v = ms[m][i];
        std::sort(v.begin(), v.end());
        std::printf("  %-10s %-8s %-44s %8.3f %8.3f %8.3f\n", names[i].c_str(), modes[m].first.c_str(),
                    points[i].describe().c_str(), v[v.size() / 2], v.front(), v.back());
      }
    if (ncu_point >= 0) {
      CUDA_CHECK(cudaProfilerStart());
      runners[0]->run(points[size_t(ncu_point)], 0, 1, 0.0);
      CUDA_CHECK(cudaProfilerStop());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "step_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
