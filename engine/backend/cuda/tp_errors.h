#pragma once
// The tensor-parallel backend's watchdog errors (tp_comm.h raises them, RankPool in
// tp_rank_pool.h sorts them): plain C++, so RankPool and its CPU tests build without CUDA.
#include <stdexcept>

namespace servelab::cuda {

/// What a rank's watchdog saw: the wait ended by the deadline, another rank's failure, or NCCL.
struct TpTimeout : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// A rank's wait given up because another rank failed: a consequence, not the cause (RankPool
/// reports the failing rank's own error rather than this one).
struct TpPeerFailed : TpTimeout {
  using TpTimeout::TpTimeout;
};

}  // namespace servelab::cuda
