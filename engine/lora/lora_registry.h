#pragma once
// LoraRegistry: the adapters a server knows by name (`--lora-modules`, /v1/load_lora_adapter),
// each a PEFT folder, with at most LoraConfig::cpu_loras() of them held in host memory (least
// recently asked for goes first; it is read again from its folder on the next request).
// Thread-safe: HTTP sessions resolve names while the engine runs.
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/lora/lora_adapter.h"
#include "engine/lora/lora_config.h"
#include "engine/model/config.h"

namespace servelab {

class LoraRegistry {
 public:
  /// A registered adapter as /v1/models lists it.
  struct Entry {
    std::string name;
    std::string path;
    uint64_t id = 0;
    int rank = 0;
    bool in_host_memory = false;
  };

  LoraRegistry(const ModelConfig& base, const LoraConfig& config);

  /// Reads the folder now (errors are read_peft_adapter's std::runtime_error) and registers it
  /// under a fresh id. Throws std::invalid_argument when `name` is taken or empty.
  std::shared_ptr<const LoraAdapter> add(const std::string& name, const std::string& path);
  /// Forgets `name`; false when it is not registered. Requests already holding it finish with it.
  bool remove(const std::string& name);
  /// The adapter registered as `name` (read again from its folder when it left host memory), or
  /// null when no adapter has that name.
  std::shared_ptr<const LoraAdapter> get(const std::string& name);
  bool contains(const std::string& name) const;
  std::vector<Entry> list() const;  ///< in registration order
  /// Folder reads after the first (host-memory misses).
  int64_t n_reloads() const;
  const LoraConfig& config() const { return config_; }

 private:
  struct Slot {
    std::string path;
    uint64_t id = 0;
    uint64_t order = 0;  // registration order
    int rank = 0;
    std::shared_ptr<const LoraAdapter> adapter;  // null when not in host memory
  };
  std::shared_ptr<const LoraAdapter> read(const std::string& name, const Slot& slot) const;
  void touch(const std::string& name);  // most recently used; evicts beyond cpu_loras()

  ModelConfig base_;
  LoraConfig config_;
  mutable std::mutex mu_;
  std::map<std::string, Slot> by_name_;
  std::list<std::string> lru_;  // in host memory, most recent first
  uint64_t next_id_ = 1;
  uint64_t next_order_ = 0;
  int64_t n_reloads_ = 0;
};

}  // namespace servelab
