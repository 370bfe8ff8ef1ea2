#pragma once
// ForwardingBackend: a Backend that hands every call to an inner one. Wrappers that observe steps
// (timing, recording) derive from it and override execute() alone.
#include <memory>
#include <utility>

#include "engine/backend/backend.h"

namespace servelab {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  const ModelConfig& config() const override { return inner_->config(); }
  BackendCaps caps() const override { return inner_->caps(); }
  std::string device_description() const override { return inner_->device_description(); }
  KvCacheSpec kv_cache_spec() const override { return inner_->kv_cache_spec(); }
  void init_kv(int64_t n_slots) override { inner_->init_kv(n_slots); }
  void reserve_steps(const StepLimits& limits) override { inner_->reserve_steps(limits); }
  std::vector<int> decode_row_buckets() const override { return inner_->decode_row_buckets(); }
  WarmShapes warm_shapes(const StepLimits& limits) const override { return inner_->warm_shapes(limits); }
  void at_time(double now_s) override { inner_->at_time(now_s); }
  StepOutput execute(const Step& step) override { return inner_->execute(step); }
  std::vector<float> step_logits(const Step& step) override { return inner_->step_logits(step); }
  void copy_slots(std::span<const KvCopy> copies) override { inner_->copy_slots(copies); }
  std::unique_ptr<HostKvPool> make_host_pool(int64_t n_slots) override { return inner_->make_host_pool(n_slots); }
  void swap_out(std::span<const KvSwap> runs, HostKvPool& pool) override { inner_->swap_out(runs, pool); }
  void swap_in(std::span<const KvSwap> runs, const HostKvPool& pool) override { inner_->swap_in(runs, pool); }
  std::optional<int64_t> kv_bytes_for_memory_share(double utilization, int max_tokens, int max_seqs) const override {
    return inner_->kv_bytes_for_memory_share(utilization, max_tokens, max_seqs);
  }
  void load_lora(int slot, std::shared_ptr<const LoraAdapter> adapter) override {
    inner_->load_lora(slot, std::move(adapter));
  }
  void stage_lora(std::shared_ptr<const LoraAdapter> adapter, double now_s) override {
    inner_->stage_lora(std::move(adapter), now_s);
  }
  bool lora_ready(const std::shared_ptr<const LoraAdapter>& adapter, double now_s) override {
    return inner_->lora_ready(adapter, now_s);
  }
  double lora_read_seconds(const LoraAdapter& adapter) const override { return inner_->lora_read_seconds(adapter); }
  void reserve_loras(int max_loras, int max_lora_rank) override { inner_->reserve_loras(max_loras, max_lora_rank); }
  std::optional<CostCounts> priced_steps() const override { return inner_->priced_steps(); }
  std::vector<std::pair<int64_t, double>> time_all_reduce(const std::vector<int64_t>& message_bytes) override {
    return inner_->time_all_reduce(message_bytes);
  }

 protected:
  Backend& inner() { return *inner_; }

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace servelab
