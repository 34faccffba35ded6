#include "mpi_job.hpp"

#include <cstdlib>
#include <string>

#ifdef CGP_HAVE_MPI
// The C API only: Open MPI's deprecated C++ bindings need a library we do not link.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

#include "cgp/common/validate.hpp"

namespace cgp::tools {

bool launched_by_mpi() noexcept {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(name)) return true;
  return false;
}

#ifndef CGP_HAVE_MPI

struct MpiJob::Reducer {};
MpiJob::MpiJob() = default;
MpiJob::~MpiJob() = default;

Expected<std::unique_ptr<MpiJob>> MpiJob::start(int*, char***) {
  return make_error(ErrorCode::invalid_argument, "mpirun",
                    "this cgp-sim was built without MPI (install libopenmpi-dev and rebuild)");
}
Status MpiJob::agree(Status local) {
  return local;
}
std::uint64_t MpiJob::reductions() const noexcept {
  return 0;
}
std::uint64_t MpiJob::bytes_reduced() const noexcept {
  return 0;
}
experiments::Dataset MpiJob::broadcast(experiments::Dataset data) {
  return data;
}
experiments::Dataset MpiJob::scatter(experiments::Dataset data) {
  return data;
}

#else

namespace {

// MPI counts are ints: large buffers go in pieces.
constexpr std::size_t kPiece = std::size_t{1} << 28;

void broadcast_doubles(std::vector<double>& values) {
  std::uint64_t size = values.size();
  MPI_Bcast(&size, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  values.resize(size);
  for (std::size_t at = 0; at < size; at += kPiece)
    MPI_Bcast(values.data() + at, static_cast<int>(std::min(kPiece, size - at)), MPI_DOUBLE, 0,
              MPI_COMM_WORLD);
}

void broadcast_string(std::string& text, int root) {
  std::uint64_t size = text.size();
  MPI_Bcast(&size, 1, MPI_UINT64_T, root, MPI_COMM_WORLD);
  text.resize(size);
  MPI_Bcast(text.data(), static_cast<int>(size), MPI_CHAR, root, MPI_COMM_WORLD);
}

// Everything of a data set but its points.
void broadcast_header(experiments::Dataset& data) {
  std::uint64_t header[2] = {data.dimension, data.size()};
  MPI_Bcast(header, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  data.dimension = header[0];
  MPI_Bcast(data.origin.data(), 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  broadcast_string(data.description, 0);
}

}  // namespace

struct MpiJob::Reducer final : coordinator::ShardReducer {
  std::uint64_t calls = 0, bytes = 0;
  void sum(std::span<std::uint64_t> values) override {
    ++calls;
    bytes += values.size_bytes();
    MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_UINT64_T,
                  MPI_SUM, MPI_COMM_WORLD);
  }
  std::vector<double> gather(std::span<const double> local) override {
    ++calls;
    bytes += local.size_bytes();
    int ranks = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    const int mine = static_cast<int>(local.size());
    std::vector<int> counts(static_cast<std::size_t>(ranks)), offsets(counts.size());
    MPI_Allgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
    int total = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) offsets[r] = total, total += counts[r];
    std::vector<double> all(static_cast<std::size_t>(total));
    MPI_Allgatherv(local.data(), mine, MPI_DOUBLE, all.data(), counts.data(), offsets.data(),
                   MPI_DOUBLE, MPI_COMM_WORLD);
    return all;
  }
};

MpiJob::MpiJob() : reducer_(std::make_unique<Reducer>()) {}

std::uint64_t MpiJob::reductions() const noexcept {
  return static_cast<const Reducer&>(*reducer_).calls;
}
std::uint64_t MpiJob::bytes_reduced() const noexcept {
  return static_cast<const Reducer&>(*reducer_).bytes;
}

MpiJob::~MpiJob() {
  MPI_Finalize();
}

Expected<std::unique_ptr<MpiJob>> MpiJob::start(int* argc, char*** argv) {
  if (MPI_Init(argc, argv) != MPI_SUCCESS)
    return make_error(ErrorCode::invalid_argument, "mpirun", "MPI_Init failed");
  // Errors come back as codes (and become named errors) instead of aborting the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::unique_ptr<MpiJob> job(new MpiJob());
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  job->rank_ = static_cast<std::size_t>(rank);
  job->size_ = static_cast<std::size_t>(size);
  return job;
}

Status MpiJob::agree(Status local) {
  int mine = local ? static_cast<int>(size_) : static_cast<int>(rank_), first = 0;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == static_cast<int>(size_)) return {};
  // The lowest failing rank tells everyone its error.
  std::string parameter, message;
  int code = 0;
  if (static_cast<int>(rank_) == first) {
    parameter = local.error().parameter;
    message = local.error().message;
    code = static_cast<int>(local.error().code);
  }
  MPI_Bcast(&code, 1, MPI_INT, first, MPI_COMM_WORLD);
  broadcast_string(parameter, first);
  broadcast_string(message, first);
  return make_error(static_cast<ErrorCode>(code), parameter,
                    "rank " + std::to_string(first) + ": " + message);
}

experiments::Dataset MpiJob::broadcast(experiments::Dataset data) {
  broadcast_header(data);
  broadcast_doubles(data.points);
  data.first = 0;
  data.total = 0;
  return data;
}

experiments::Dataset MpiJob::scatter(experiments::Dataset data) {
  broadcast_header(data);
  std::uint64_t users = data.size();
  MPI_Bcast(&users, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  // Rows as one MPI type: counts in rows fit an int up to 2^31 users a rank.
  MPI_Datatype row;
  MPI_Type_contiguous(static_cast<int>(data.dimension), MPI_DOUBLE, &row);
  MPI_Type_commit(&row);
  std::vector<int> counts(size_), offsets(size_);
  for (std::size_t r = 0; r < size_; ++r) {
    const auto slice = coordinator::shard_slice(users, r, size_);
    counts[r] = static_cast<int>(slice.size);
    offsets[r] = static_cast<int>(slice.first);
  }
  const auto mine = coordinator::shard_slice(users, rank_, size_);
  experiments::Dataset out;
  out.dimension = data.dimension;
  out.origin = data.origin;
  out.description = data.description;
  out.points.resize(mine.size * data.dimension);
  out.first = mine.first;
  out.total = users;
  MPI_Scatterv(data.points.data(), counts.data(), offsets.data(), row, out.points.data(),
               counts[rank_], row, 0, MPI_COMM_WORLD);
  MPI_Type_free(&row);
  return out;
}

#endif

}  // namespace cgp::tools
