#include "cgp/experiments/data_source.hpp"

#include <openssl/evp.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <vector>

#include "cgp/common/validate.hpp"

namespace cgp::experiments {

Expected<Dataset> source_locations(const DataSource& source, std::size_t fleet_users) {
  Dataset data;
  if (source.path.empty()) {
    data = synthetic_locations(fleet_users    ? fleet_users
                               : source.users ? source.users
                                              : kDefaultCityUsers,
                               source.seed);
  } else {
    CGP_ASSIGN_OR_RETURN(auto loaded, load_locations(source.path, source.projection));
    data = std::move(loaded);
    if (source.users) data = resample(data, source.users, source.seed);
  }
  if (fleet_users) {
    if (data.size() < fleet_users)
      return make_error(ErrorCode::out_of_range, "fleet",
                        "--fleet: the coordinator has " + std::to_string(fleet_users) +
                            " devices, the data only " + std::to_string(data.size()) + " rows");
    data.points.resize(fleet_users * data.dimension);
    data.total = 0;
    data.description += " (first " + std::to_string(fleet_users) + " rows, over --fleet)";
  }
  return data;
}

Expected<Dataset> default_vector_candidates() {
  auto train = load_idx(kFashionMnistTrain);
  if (!train)
    return make_error(
        ErrorCode::invalid_argument, "data",
        "knn without --data needs Debian's dataset-fashion-mnist (" + train.error().message + ")");
  return train;
}

Expected<VectorData> source_vectors(const DataSource& source,
                                    const std::vector<std::string>& columns) {
  VectorData out;
  if (source.path.empty()) {
    CGP_ASSIGN_OR_RETURN(out.candidates, default_vector_candidates());
    CGP_ASSIGN_OR_RETURN(auto test, load_idx(kFashionMnistTest));
    out.queries = std::move(test);
  } else {
    CGP_ASSIGN_OR_RETURN(out.candidates, load_vectors(source.path, source.projection, columns));
  }
  if (source.users) out.candidates = resample(out.candidates, source.users, source.seed);
  return out;
}

std::vector<double> synthetic_incomes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> income(11.0, 0.9);
  std::vector<double> values(n);
  for (double& v : values) v = income(rng);
  return values;
}

Expected<ValueColumn> source_values(const DataSource& source, const std::string& column) {
  ValueColumn out;
  if (source.path.empty()) {
    out.values = synthetic_incomes(source.users ? source.users : kDefaultHouseholds, source.seed);
    out.description =
        "built-in households: " + std::to_string(out.values.size()) + " lognormal incomes";
    return out;
  }
  CGP_ASSIGN_OR_RETURN(out.values, load_column(source.path, column));
  out.description =
      source.path + ": column " + column + ", " + std::to_string(out.values.size()) + " rows";
  return out;
}

std::string data_sha256(const std::string& path) {
  // A regular file only: /dev/zero never ends and a FIFO blocks (the loaders refuse both by name).
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return {};
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  // OpenSSL's SHA-256 uses the CPU's SHA extensions: ~1.5 GB/s here against libsodium's
  // portable ~0.25 GB/s, which took 15% of a small run's process time.
  const std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(),
                                                                        &EVP_MD_CTX_free);
  if (!context || EVP_DigestInit_ex(context.get(), EVP_sha256(), nullptr) != 1) return {};
  std::vector<char> buffer(std::size_t{1} << 16);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto got = in.gcount();
    if (got > 0 &&
        EVP_DigestUpdate(context.get(), buffer.data(), static_cast<std::size_t>(got)) != 1)
      return {};
  }
  if (in.bad()) return {};
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(context.get(), digest, &length) != 1) return {};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 15];
  }
  return hex;
}

}  // namespace cgp::experiments
