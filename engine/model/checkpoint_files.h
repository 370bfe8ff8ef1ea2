#pragma once
// A Hugging Face model folder's safetensors files, opened as tensors are asked for, and each
// tensor checked against what the model expects. Shared by the CUDA backend's loaders (the whole
// model, cuda_weights.cu; one tensor-parallel rank's shard, tp_weights.cu).
#include <map>
#include <string>

#include "engine/model/safetensors.h"
#include "engine/model/tensors.h"

namespace servelab {

class CheckpointFiles {
 public:
  /// The folder's model.safetensors, or the shards its model.safetensors.index.json lists (a
  /// single file wins over an index, as in transformers). Throws std::runtime_error("DIR: neither
  /// ... nor ... found") when it has neither, or read_weight_map's error for a bad index.
  explicit CheckpointFiles(const std::string& dir);

  /// The file holding `name`, opened on first use. Throws std::runtime_error naming the index when
  /// it lacks the tensor or lists a shard that does not exist.
  const SafetensorsFile& file_for(const std::string& name);
  /// `spec`'s tensor and its file, checked: present, of spec's shape, in a dtype the loaders read
  /// (BF16, F16, F32). Throws std::runtime_error("FILE: ...") naming what is wrong.
  std::pair<const SafetensorsFile*, const SafetensorsTensor*> checked(const TensorSpec& spec);
  /// Every file opened so far, by file name.
  const std::map<std::string, SafetensorsFile>& opened() const { return files_; }

 private:
  std::string root_, index_;
  bool sharded_ = false;
  std::map<std::string, std::string> weight_map_;
  std::map<std::string, SafetensorsFile> files_;
};

}  // namespace servelab
