// The `backend:` section of a scenario: which backend runs the engine (cpu, sim, cuda) and its
// options (threads, the sim's device and profile, the cuda device, graphs, tensor parallelism and
// its all-reduce, dtype). Errors name the key at its file:line:col; a key of another kind's backend
// is an error naming the kind it applies to.
#include "loadgen/scenario_parse.h"
#include "loadgen/yaml_reader.h"

namespace servelab {
namespace {

using namespace scenario_yaml;

class BackendWalker : public YamlReader {
 public:
  using YamlReader::YamlReader;

  void backend(const YAML::Node& n) {
    const Options<BackendKind> kinds{{"cpu", BackendKind::cpu}, {"sim", BackendKind::sim}, {"cuda", BackendKind::cuda}};
    auto& b = s_.backend;
    if (n.IsScalar()) {  // `backend: cuda`, short for {kind: cuda}
      read_enum(n, "backend", b.kind, kinds);
      return;
    }
    if (!section(n, "backend", {"kind", "threads", "sim_device", "sim_profile", "sim_retarget", "sim_cost_scale", "ceilings",
                                "device", "fusion", "batch_invariant", "cuda_graphs", "tensor_parallel", "dtype", "all_reduce",
                                "all_reduce_max_bytes", "mixed_decodes"}))
      return;
    bool kind_ok = true;
    if (defined(n["kind"])) kind_ok = read_enum(n["kind"], "backend.kind", b.kind, kinds);
    if (defined(n["threads"])) read_int(n["threads"], "backend.threads", b.threads);
    for (const std::string k : {"sim_device", "sim_profile", "sim_retarget"}) {
      if (!defined(n[k])) continue;
      const std::string p = "backend." + k;
      if (kind_ok && b.kind != BackendKind::sim) {
        note(n[k], p);
        d_.error_at(p, p + " applies to kind: sim, not " + to_string(b.kind));
      } else if (k != "sim_profile") {
        k == "sim_device" ? read_string(n[k], p, b.sim_device) : read_bool(n[k], p, b.sim_retarget);
      } else {
        read_path(n[k], p, b.sim_profile);
      }
    }
    if (defined(n["ceilings"])) {
      if (kind_ok && b.kind == BackendKind::sim) {
        note(n["ceilings"], "backend.ceilings");
        d_.error_at("backend.ceilings", "backend.ceilings applies to kind: cpu or cuda (the sim's steps are priced, not measured)");
      } else {
        read_path(n["ceilings"], "backend.ceilings", b.ceilings);
      }
    }
    if (defined(n["sim_cost_scale"])) {
      const std::string p = "backend.sim_cost_scale";
      if (kind_ok && b.kind != BackendKind::sim) {
        note(n["sim_cost_scale"], p);
        d_.error_at(p, p + " applies to kind: sim, not " + to_string(b.kind));
      } else if (read_double(n["sim_cost_scale"], p, b.sim_cost_scale) &&
                 (!(b.sim_cost_scale > 0.0) || b.sim_cost_scale > 1000.0)) {
        d_.error(p, "must be in (0, 1000] (got " + fmt_double(b.sim_cost_scale) + ")");
      }
    }
    if (defined(n["tensor_parallel"])) {
      const std::string p = "backend.tensor_parallel";
      if (kind_ok && b.kind == BackendKind::cpu) {
        note(n["tensor_parallel"], p);
        d_.error_at(p, p + " applies to kind: cuda or sim, not cpu");
      } else if (read_int(n["tensor_parallel"], p, b.tensor_parallel) &&
                 (b.tensor_parallel < 1 || b.tensor_parallel > 64)) {
        d_.error(p, "must be in [1, 64] (got " + std::to_string(b.tensor_parallel) + ")");
      }
    }
    if (defined(n["dtype"])) {
      const std::string p = "backend.dtype";
      if (kind_ok && b.kind == BackendKind::cpu) {
        note(n["dtype"], p);
        d_.error_at(p, p + " applies to kind: cuda or sim, not cpu (the cpu backend computes in fp32; model.dtype "
                           "rounds its random weights)");
      } else {
        read_enum(n["dtype"], p, b.dtype,
                  Options<DType>{{"bf16", DType::bf16}, {"f16", DType::f16}, {"bfloat16", DType::bf16},
                                 {"float16", DType::f16}});
      }
    }
    for (const char* k :
         {"device", "fusion", "batch_invariant", "cuda_graphs", "all_reduce", "all_reduce_max_bytes", "mixed_decodes"}) {
      if (!defined(n[k])) continue;
      const std::string p = std::string("backend.") + k;
      if (kind_ok && b.kind != BackendKind::cuda) {
        note(n[k], p);
        d_.error_at(p, p + " applies to kind: cuda, not " + to_string(b.kind));
        continue;
      }
      const std::string key = k;
      if (key == "device") {
        if (read_int(n[k], p, b.device) && b.device < 0) d_.error(p, "must be >= 0 (got " + std::to_string(b.device) + ")");
      } else if (key == "fusion") {
        read_bool(n[k], p, b.fusion);
      } else if (key == "batch_invariant") {
        read_bool(n[k], p, b.batch_invariant);
      } else if (key == "all_reduce") {
        read_enum(n[k], p, b.all_reduce,
                  Options<TpAllReduce>{{"auto", TpAllReduce::auto_select}, {"nccl", TpAllReduce::nccl},
                                       {"custom", TpAllReduce::custom}});
      } else if (key == "mixed_decodes") {
        read_enum(n[k], p, b.mixed_decodes,
                  Options<cuda::MixedDecodes>{{"auto", cuda::MixedDecodes::auto_select},
                                              {"prefill", cuda::MixedDecodes::prefill_kernel},
                                              {"decode", cuda::MixedDecodes::decode_kernel}});
      } else if (key == "all_reduce_max_bytes") {
        int v = 0;
        if (read_int(n[k], p, v)) {
          if (v < 16 || v > (1 << 30) || v % 16)
            d_.error(p, "must be a multiple of 16 in [16, 1073741824] (got " + std::to_string(v) + ")");
          else
            b.all_reduce_max_bytes = v;
        }
      } else {
        read_bool(n[k], p, b.cuda_graphs);
      }
    }
  }
};

}  // namespace

void parse_backend_section(const YAML::Node& node, const std::vector<AppliedOverride>& overrides, Scenario& scenario,
                           Diagnostics& diag) {
  BackendWalker(overrides, scenario, diag).backend(node);
}

}  // namespace servelab
