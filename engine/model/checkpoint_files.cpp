#include "engine/model/checkpoint_files.h"

#include <filesystem>
#include <stdexcept>

#include "engine/model/weight_map.h"

namespace servelab {

namespace fs = std::filesystem;

namespace {
constexpr const char* kIndex = "model.safetensors.index.json";
constexpr const char* kSingle = "model.safetensors";
}  // namespace

CheckpointFiles::CheckpointFiles(const std::string& dir)
    : root_(dir), index_((fs::path(dir) / kIndex).string()) {
  const fs::path root(dir);
  sharded_ = !fs::exists(root / kSingle) && fs::exists(root / kIndex);
  if (sharded_)
    weight_map_ = read_weight_map(index_);
  else if (!fs::exists(root / kSingle))
    throw std::runtime_error(dir + ": neither " + std::string(kSingle) + " nor " + kIndex + " found");
}

const SafetensorsFile& CheckpointFiles::file_for(const std::string& name) {
  std::string f = kSingle;
  if (sharded_) {
    auto it = weight_map_.find(name);
    if (it == weight_map_.end()) throw std::runtime_error(index_ + ": missing tensor " + name + " in weight_map");
    f = it->second;
  }
  auto it = files_.find(f);
  if (it == files_.end()) {
    const fs::path path = fs::path(root_) / f;
    if (!fs::exists(path)) throw std::runtime_error(index_ + ": lists shard " + f + ", which does not exist");
    it = files_.emplace(f, SafetensorsFile(path.string())).first;
  }
  return it->second;
}

std::pair<const SafetensorsFile*, const SafetensorsTensor*> CheckpointFiles::checked(const TensorSpec& spec) {
  const SafetensorsFile& f = file_for(spec.name);
  const SafetensorsTensor* t = f.find(spec.name);
  if (!t) throw std::runtime_error(f.path() + ": missing tensor " + spec.name + " (shape " + shape_string(spec.shape) + ")");
  if (t->shape != spec.shape)
    throw std::runtime_error(f.path() + ": tensor " + spec.name + " has shape " + shape_string(t->shape) +
                             ", expected " + shape_string(spec.shape));
  if (!t->supported)
    throw std::runtime_error(f.path() + ": tensor " + spec.name + " has dtype " + t->dtype_name +
                             "; only BF16, F16 and F32 checkpoints are supported");
  return {&f, t};
}

}  // namespace servelab
