// cgp-sim under mpirun (or srun): the job's ranks, the reducer the shard-local engine meets in,
// and the collective steps of loading data. Built when CMake finds MPI (CGP_HAVE_MPI); MPI is
// initialised only in a process that a launcher started, so a plain `cgp-sim ...` never
// touches it.
#pragma once

#include <cstdint>
#include <memory>

#include "cgp/common/expected.hpp"
#include "cgp/coordinator/shard.hpp"
#include "cgp/experiments/dataset.hpp"

namespace cgp::tools {

// Whether mpirun / mpiexec / srun started this process (Open MPI, PMIx, MPICH/Slurm PMI).
bool launched_by_mpi() noexcept;

class MpiJob {
 public:
  // MPI_Init; an error when this cgp-sim was built without MPI.
  static Expected<std::unique_ptr<MpiJob>> start(int* argc, char*** argv);
  MpiJob(const MpiJob&) = delete;
  MpiJob& operator=(const MpiJob&) = delete;
  ~MpiJob();  // MPI_Finalize

  std::size_t rank() const noexcept { return rank_; }
  std::size_t size() const noexcept { return size_; }
  coordinator::ShardReducer& reducer() noexcept { return *reducer_; }
  // What this rank put into the engine's reductions so far: calls and bytes.
  std::uint64_t reductions() const noexcept;
  std::uint64_t bytes_reduced() const noexcept;

  // Every rank passes its own status; every rank gets an error when one failed: the lowest
  // failing rank's, its message prefixed with "rank R: ". One reduction (and one broadcast on
  // failure): a failing rank never leaves the others waiting.
  Status agree(Status local);
  // Rank 0's data set to every rank (others pass anything): points, dimension, origin and
  // description. Collective; rank 0's failure (agreed first by the caller) must not reach here.
  experiments::Dataset broadcast(experiments::Dataset data);
  // Rank 0's data set split into shard_slice()s: each rank gets its rows, with first/total.
  experiments::Dataset scatter(experiments::Dataset data);

 private:
  struct Reducer;
  MpiJob();
  std::size_t rank_ = 0, size_ = 1;
  std::unique_ptr<coordinator::ShardReducer> reducer_;
};

}  // namespace cgp::tools
