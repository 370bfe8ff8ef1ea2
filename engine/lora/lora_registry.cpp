#include "engine/lora/lora_registry.h"

#include <algorithm>
#include <stdexcept>

#include "engine/lora/peft.h"

namespace servelab {

LoraRegistry::LoraRegistry(const ModelConfig& base, const LoraConfig& config) : base_(base), config_(config) {
  config_.validate();
}

std::shared_ptr<const LoraAdapter> LoraRegistry::read(const std::string& name, const Slot& slot) const {
  LoraAdapter a = read_peft_adapter(slot.path, name, base_, config_.max_lora_rank);
  a.id = slot.id;
  return std::make_shared<const LoraAdapter>(std::move(a));
}

void LoraRegistry::touch(const std::string& name) {
  lru_.remove(name);
  lru_.push_front(name);
  while (static_cast<int>(lru_.size()) > config_.cpu_loras()) {
    by_name_.at(lru_.back()).adapter.reset();  // in-flight requests keep their own reference
    lru_.pop_back();
  }
}

std::shared_ptr<const LoraAdapter> LoraRegistry::add(const std::string& name, const std::string& path) {
  if (name.empty()) throw std::invalid_argument("a LoRA adapter needs a name");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (by_name_.count(name)) throw std::invalid_argument("LoRA adapter '" + name + "' is already loaded");
  }
  // Read outside the lock (a folder read); the id is given under it.
  auto a = std::make_shared<LoraAdapter>(read_peft_adapter(path, name, base_, config_.max_lora_rank));
  std::lock_guard<std::mutex> lock(mu_);
  if (by_name_.count(name)) throw std::invalid_argument("LoRA adapter '" + name + "' is already loaded");
  Slot slot;
  slot.path = path;
  slot.id = a->id = next_id_++;
  slot.order = next_order_++;
  slot.rank = a->rank;
  slot.adapter = a;
  by_name_.emplace(name, std::move(slot));
  touch(name);
  return a;
}

bool LoraRegistry::remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!by_name_.erase(name)) return false;
  lru_.remove(name);
  return true;
}

std::shared_ptr<const LoraAdapter> LoraRegistry::get(const std::string& name) {
  Slot copy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return nullptr;
    if (it->second.adapter) {
      touch(name);
      return it->second.adapter;
    }
    copy = it->second;
  }
  std::shared_ptr<const LoraAdapter> a = read(name, copy);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_name_.find(name);
  if (it == by_name_.end() || it->second.id != copy.id) return a;  // removed meanwhile: serve this one request
  ++n_reloads_;
  if (!it->second.adapter) it->second.adapter = a;
  touch(name);
  return it->second.adapter;
}

bool LoraRegistry::contains(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_name_.count(name) > 0;
}

std::vector<LoraRegistry::Entry> LoraRegistry::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<uint64_t, Entry>> v;
  for (const auto& [name, s] : by_name_) v.push_back({s.order, Entry{name, s.path, s.id, s.rank, s.adapter != nullptr}});
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Entry> out;
  for (auto& [o, e] : v) out.push_back(std::move(e));
  return out;
}

int64_t LoraRegistry::n_reloads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return n_reloads_;
}

}  // namespace servelab
