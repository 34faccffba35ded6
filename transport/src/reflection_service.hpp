// gRPC server reflection on the coordinator's ports (what `grpcurl list` and `describe` ask),
// bounded. It needs no credential, and gRPC's reflection plugin served each
// stream on a thread of its own for as long as the client liked; here every stream is admitted
// by a StreamRegistry (caps per connection, per address, in all; a lifetime) and answered on
// gRPC's callback threads. Descriptors come from the process's generated pool, as the plugin's.
//
// Two versions of the protocol, one service: grpc.reflection.v1 (what current grpcurl and other
// tools ask first) and grpc.reflection.v1alpha (older clients; the only one Debian's gRPC 1.51
// ships). Their messages are field for field the same, so one stream class, templated on the
// version's generated types, serves both, and one registry counts the streams of both.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "stream_registry.hpp"

namespace cgp::transport::detail {

class ReflectionService {
 public:
  // `services`: the full names of this server's other services; `list_services` answers them
  // and both reflection services.
  ReflectionService(StreamCaps caps, std::vector<std::string> services,
                    std::function<void(const std::string& reason)> refused);
  ~ReflectionService();  // after the server is shut down
  ReflectionService(const ReflectionService&) = delete;
  ReflectionService& operator=(const ReflectionService&) = delete;

  // The gRPC services to register with the server (both, for as long as this lives).
  grpc::Service& v1() noexcept;
  grpc::Service& v1alpha() noexcept;

  // Ends every stream (of both versions) and refuses new ones.
  void shutdown();
  std::size_t open_streams() const { return streams_.open(); }

 private:
  template <class Version>
  class Stream;
  template <class Version>
  class Endpoint;

  // The answer to one request; `sent` holds the files this stream has sent already (each file
  // goes once per stream, with the files it imports).
  template <class Version>
  typename Version::Response answer(const typename Version::Request& request,
                                    std::set<std::string>& sent) const;

  const std::vector<std::string> services_;
  const std::function<void(const std::string&)> refused_;
  StreamRegistry streams_;
  std::unique_ptr<grpc::Service> v1_, v1alpha_;
};

}  // namespace cgp::transport::detail
