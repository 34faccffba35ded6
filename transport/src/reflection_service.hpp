// gRPC server reflection on the coordinator's ports (what `grpcurl list` and `describe` ask),
// bounded. It needs no credential, and gRPC's reflection plugin served each
// stream on a thread of its own for as long as the client liked; here every stream is admitted
// by a StreamRegistry (caps per connection, per address, in all; a lifetime) and answered on
// gRPC's callback threads. Descriptors come from the process's generated pool, as the plugin's.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "stream_registry.hpp"

namespace cgp::transport::detail {

class ReflectionService final
    : public grpc::reflection::v1alpha::ServerReflection::CallbackService {
 public:
  using Request = grpc::reflection::v1alpha::ServerReflectionRequest;
  using Response = grpc::reflection::v1alpha::ServerReflectionResponse;

  // `services`: the full names `list_services` answers (this server's services).
  ReflectionService(StreamCaps caps, std::vector<std::string> services,
                    std::function<void(const std::string& reason)> refused);
  ~ReflectionService() override = default;  // after the server is shut down
  ReflectionService(const ReflectionService&) = delete;
  ReflectionService& operator=(const ReflectionService&) = delete;

  // Ends every stream and refuses new ones.
  void shutdown();
  std::size_t open_streams() const { return streams_.open(); }

  // The answer to one request; `sent` holds the files this stream has sent already (each file
  // goes once per stream, with the files it imports).
  Response answer(const Request& request, std::set<std::string>& sent) const;

  grpc::ServerBidiReactor<Request, Response>* ServerReflectionInfo(
      grpc::CallbackServerContext* context) override;

 private:
  class Stream;
  const std::vector<std::string> services_;
  const std::function<void(const std::string&)> refused_;
  StreamRegistry streams_;
};

}  // namespace cgp::transport::detail
