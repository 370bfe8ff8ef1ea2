#include "engine/backend/cuda/tp_weights.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

#include "engine/model/safetensors.h"
#include "engine/model/checkpoint_files.h"

namespace servelab::cuda {
namespace {

namespace fs = std::filesystem;

/// A rank's tensor and where it goes in the 16-bit storage (element offset).
struct ShardPlacement {
  TensorShard shard;
  int64_t offset = 0;
};

/// Lays the rank's shards out as cuda_weights.cu's lay_out lays out the whole model (merged Q|K|V
/// and gate|up rows adjacent, 16-byte aligned) and sets w's pointers. The LM head of a tied model
/// is the rank's vocabulary rows of the replicated embedding.
std::vector<ShardPlacement> lay_out_shards(const TpPlan& plan, int rank, DeviceWeights& w) {
  const ModelConfig& c = plan.model;
  w.config = c;
  std::map<std::string, TensorShard> by_name;
  for (const TensorShard& s : plan.shards(rank)) by_name.emplace(s.spec.name, s);
  std::vector<ShardPlacement> out;
  const std::vector<int64_t> offsets = allocate_layout(
      w,
      [&](const std::string& name) {
        out.push_back({by_name.at(name), 0});
        return out.back().shard.local_numel();
      },
      [&](int64_t embedding) { return embedding + int64_t(rank) * plan.vocab * c.hidden_size; },
      "the model weights (this rank's shard)");
  for (size_t i = 0; i < out.size(); ++i) out[i].offset = offsets[i];
  return out;
}

}  // namespace

DeviceWeights shard_random(const TpPlan& plan, int rank, uint64_t seed, DType storage) {
  DeviceWeights w;
  w.storage_dtype = storage;
  const std::vector<ShardPlacement> places = lay_out_shards(plan, rank, w);
  auto* base = w.storage.get<uint16_t>();
  for (const ShardPlacement& p : places) {
    const TensorShard& s = p.shard;
    random_window(s.spec, seed, plan.model.dtype, s.first_element(), s.full_cols(), s.local_rows(), s.local_cols(),
                  base + p.offset, storage);
  }
  return w;
}

DeviceWeights shard_load(const std::string& dir, const TpPlan& plan, int rank, DType storage) {
  CheckpointFiles files(dir);

  DeviceWeights w;
  w.storage_dtype = storage;
  const std::vector<ShardPlacement> places = lay_out_shards(plan, rank, w);
  // Check every tensor before copying any.
  std::vector<std::pair<const SafetensorsFile*, const SafetensorsTensor*>> sources;
  for (const ShardPlacement& p : places) {
    const TensorSpec& spec = p.shard.spec;
    sources.push_back(files.checked(spec));
  }

  // The shard's window, a chunk of whole local rows at a time: mapped file -> staging (a 2-D copy
  // picks the columns) -> the storage dtype in place.
  constexpr int64_t kChunk = 64ll << 20;
  DeviceBuffer staging(kChunk, "the checkpoint staging buffer");
  auto* base = w.storage.get<uint16_t>();
  for (size_t i = 0; i < places.size(); ++i) {
    const TensorShard& s = places[i].shard;
    const SafetensorsTensor& t = *sources[i].second;
    const int64_t esize = static_cast<int64_t>(dtype_size(t.dtype));
    const int64_t rows = s.local_rows(), cols = s.local_cols();
    const int64_t per_chunk = std::max<int64_t>(1, kChunk / (cols * esize));
    if (cols * esize > kChunk) throw std::runtime_error(t.name + ": a row is larger than the staging buffer");
    const uint8_t* src = sources[i].first->data(t) + s.first_element() * esize;
    for (int64_t done = 0; done < rows; done += per_chunk) {
      const int64_t n = std::min(per_chunk, rows - done);
      CUDA_CHECK(cudaMemcpy2D(staging.get(), size_t(cols * esize), src + done * s.full_cols() * esize,
                              size_t(s.full_cols() * esize), size_t(cols * esize), size_t(n), cudaMemcpyHostToDevice));
      convert_to_storage(staging.get(), t.dtype, base + places[i].offset + done * cols, n * cols, storage);
    }
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  return w;
}

}  // namespace servelab::cuda
