// A hostile or broken peer on the device port: bytes that are not a message, messages over the
// size limit, a stream that does not start with Hello, a wrong protocol version, a device that
// answers for another device, a duplicated reply. The gateway refuses each by name, keeps
// serving everyone else, and never lets one stream's bytes count for another device.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "cgp/common/wire/limits.hpp"
#include "cgp/coordinator/fleet.hpp"
#include "cgp/protocol/log_format.hpp"
#include "cgp/transport/credentials.hpp"
#include "cgp/transport/gateway.hpp"
#include "cgp/v1/device_gateway.grpc.pb.h"
#include "support/seed.hpp"

using namespace cgp;
using namespace std::chrono_literals;

namespace {

constexpr const char* kConnect = "/cgp.v1.DeviceGateway/Connect";

// Sends raw messages, in order, on a Connect stream and returns the stream's status.
class RawStream final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  RawStream(grpc::GenericStub& stub, const std::vector<std::string>& messages) {
    for (const auto& bytes : messages) {
      grpc::Slice slice(bytes);
      outgoing_.emplace_back(&slice, 1);
    }
    context_.set_deadline(std::chrono::system_clock::now() + 20s);
    stub.PrepareBidiStreamingCall(&context_, kConnect, {}, this);
    StartWrite(&outgoing_[0]);
    StartRead(&incoming_);
    StartCall();
  }
  grpc::Status status() { return done_.get_future().get(); }
  void OnWriteDone(bool ok) override {
    if (ok && ++written_ < outgoing_.size()) StartWrite(&outgoing_[written_]);
  }
  void OnReadDone(bool ok) override {
    if (ok) StartRead(&incoming_);
  }
  void OnDone(const grpc::Status& status) override { done_.set_value(status); }

 private:
  grpc::ClientContext context_;
  std::vector<grpc::ByteBuffer> outgoing_;
  std::size_t written_ = 0;
  grpc::ByteBuffer incoming_;
  std::promise<grpc::Status> done_;
};

grpc::Status send_raw(const std::string& address, const std::vector<std::string>& messages) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  RawStream stream(stub, messages);
  return stream.status();
}
grpc::Status send_raw(const std::string& address, const std::string& bytes) {
  return send_raw(address, std::vector<std::string>{bytes});
}

// The gateway's log lines, for tests that read what it said.
struct LogLines {
  std::mutex mutex;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& line) {
      std::lock_guard lock(mutex);
      lines.push_back(line);
    };
  }
  // The first line holding every one of `parts`, waiting up to 10 s for it.
  std::string find(std::initializer_list<std::string_view> parts) {
    const auto give_up = std::chrono::steady_clock::now() + 10s;
    do {
      {
        std::lock_guard lock(mutex);
        for (const auto& line : lines) {
          bool all = true;
          for (auto part : parts) all = all && line.find(part) != std::string::npos;
          if (all) return line;
        }
      }
      std::this_thread::sleep_for(5ms);
    } while (std::chrono::steady_clock::now() < give_up);
    return {};
  }
};

using Stream = grpc::ClientReaderWriter<v1::DeviceToCoordinator, v1::CoordinatorToDevice>;

// A hand-driven device stream (no client::Device behind it).
struct HandStream {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::DeviceGateway::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream;
  HandStream(const std::string& address, const std::string& id) {
    grpc::ChannelArguments arguments;
    arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), arguments);
    stub = v1::DeviceGateway::NewStub(channel);
    context.set_deadline(std::chrono::system_clock::now() + 30s);
    stream = stub->Connect(&context);
    v1::DeviceToCoordinator hello;
    hello.mutable_hello()->set_device_id(id);
    hello.mutable_hello()->set_protocol_version(wire::kProtocolVersion);
    REQUIRE(stream->Write(hello));
    v1::CoordinatorToDevice welcome;
    REQUIRE(stream->Read(&welcome));
    REQUIRE(welcome.has_welcome());
  }
  void send_reply(const v1::RequestId& id, double x, double y) {
    v1::DeviceToCoordinator message;
    auto* reply = message.mutable_reply();
    *reply->mutable_id() = id;
    reply->set_status(v1::ANSWERED);
    reply->add_values(x);
    reply->add_values(y);
    reply->set_charged_rho(0.01);
    reply->set_remaining_budget(0.5);
    REQUIRE(stream->Write(message));
  }
  grpc::Status close() {
    stream->WritesDone();
    v1::CoordinatorToDevice ignored;
    while (stream->Read(&ignored)) {
    }
    return stream->Finish();
  }
};

}  // namespace

TEST_CASE("wire: bytes that are not a message, oversized and out-of-order messages are refused",
          "[transport][wire]") {
  auto gateway = *transport::DeviceGateway::start("127.0.0.1:0");
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());

  SECTION("bytes that do not parse") {
    // Named, not OK: gRPC's typed API would report them as a half-close (the status was OK).
    const auto status = send_raw(address, std::string("\xff\xff\xff\xff\x0f garbage", 14));
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(status.error_message() == "a message does not parse as cgp.v1.DeviceToCoordinator");
    CHECK(gateway->connected() == 0);
  }
  SECTION("a message over the 1 MiB limit is refused before it is parsed") {
    v1::DeviceToCoordinator hello;
    hello.mutable_hello()->set_device_id("big");
    hello.mutable_hello()->set_protocol_version(wire::kProtocolVersion);
    hello.mutable_hello()->set_credential(std::string(wire::kMaxMessageBytes + 16, 'x'));
    const auto status = send_raw(address, hello.SerializeAsString());
    CHECK(status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  SECTION("a stream that starts with a reply instead of Hello") {
    v1::DeviceToCoordinator reply;
    reply.mutable_reply()->set_status(v1::ANSWERED);
    const auto status = send_raw(address, reply.SerializeAsString());
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(status.error_message() == "the first message must be Hello");
  }
  SECTION("a protocol version the gateway does not speak") {
    v1::DeviceToCoordinator hello;
    hello.mutable_hello()->set_device_id("future");
    hello.mutable_hello()->set_protocol_version(wire::kProtocolVersion + 1);
    const auto status = send_raw(address, hello.SerializeAsString());
    CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  }
  SECTION("an empty device id") {
    v1::DeviceToCoordinator hello;
    hello.mutable_hello()->set_protocol_version(wire::kProtocolVersion);
    const auto status = send_raw(address, hello.SerializeAsString());
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  // None of them became a device, and the gateway still admits a well-formed one.
  CHECK(gateway->counters().connects == 0);
  HandStream good(address, "good");
  CHECK(gateway->wait_for_devices(1, 10s));
  CHECK(good.close().ok());
}

TEST_CASE("wire: a device cannot answer for another, and a duplicated reply counts once",
          "[transport][wire]") {
  auto gateway = *transport::DeviceGateway::start("127.0.0.1:0");
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());
  HandStream honest(address, "honest"), forger(address, "forger");
  REQUIRE(gateway->wait_for_devices(2, 10s));

  // Only "honest" is asked. "forger" answers the same request id first; then "honest" answers
  // twice.
  transport::NetworkFleet fleet(*gateway, {"honest", "forger"}, 2, 1.0, 1s);
  std::vector<coordinator::UserId> users{0};
  std::vector<double> rho{0.01};
  coordinator::RoundRequest request;
  request.query_id = "forgery";
  request.round = 1;
  request.statistic = StatisticKind::location;
  request.users = users;
  request.rho = rho;
  std::jthread devices([&] {
    v1::CoordinatorToDevice pushed;
    REQUIRE(honest.stream->Read(&pushed));
    REQUIRE(pushed.has_request());
    forger.send_reply(pushed.request().id(), -1, -1);
    // Give the forged reply time to arrive first.
    std::this_thread::sleep_for(100ms);
    honest.send_reply(pushed.request().id(), 10, 20);
    honest.send_reply(pushed.request().id(), 30, 40);
  });
  coordinator::RoundReplies replies;
  fleet.ask(request, replies);
  devices.join();
  REQUIRE(replies.kind[0] == coordinator::ReplyKind::answered);
  CHECK(replies.values[0] == 10);
  CHECK(replies.values[1] == 20);
  // The forged and the duplicated reply were dropped (the duplicate may land after the round).
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (gateway->counters().late_replies < 2 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(5ms);
  CHECK(gateway->counters().late_replies == 2);
  CHECK(honest.close().ok());
  CHECK(forger.close().ok());
}

TEST_CASE("wire: a device id with a newline is refused and cannot forge log lines",
          "[transport][wire]") {
  // A newline in an unauthenticated Hello.device_id wrote forged lines into the
  // event log. Ids are checked at the edge (a documented character set) and log values quoted.
  std::mutex log_mutex;
  std::vector<std::string> log;
  transport::GatewayOptions options;
  options.log = [&](const std::string& line) {
    std::lock_guard lock(log_mutex);
    log.push_back(line);
  };
  auto gateway = *transport::DeviceGateway::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());
  v1::DeviceToCoordinator hello;
  hello.mutable_hello()->set_device_id("evil\nts=2026-01-01T00:00:00Z event=connect device=x\"");
  hello.mutable_hello()->set_protocol_version(wire::kProtocolVersion);
  const auto status = send_raw(address, hello.SerializeAsString());
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(status.error_message().find("device_id") != std::string::npos);
  CHECK(gateway->counters().connects == 0);
  std::lock_guard lock(log_mutex);
  REQUIRE(!log.empty());
  bool refused_logged = false;
  for (const auto& line : log) {
    INFO(line);
    CHECK(line.find('\n') == std::string::npos);
    if (line.find("reason=device-id") != std::string::npos) {
      refused_logged = true;
      CHECK(line.find("device=\"evil\\nts=") != std::string::npos);
    }
  }
  CHECK(refused_logged);
}

TEST_CASE("wire: ids and log values follow the documented character set", "[transport][wire]") {
  CHECK(protocol::require_id("id", "device-17").ok());
  CHECK(protocol::require_id("id", "phone_1.eu:7@org/x+y").ok());
  for (const std::string& bad : {std::string(), std::string("a b"), std::string("a,b"),
                                 std::string("a\nb"), std::string("a\"b"), std::string(129, 'x')}) {
    auto status = protocol::require_id("query_id", bad);
    REQUIRE_FALSE(status.ok());
    CHECK(status.error().parameter == "query_id");
  }
  // An enrolment file with such an id is refused by name, file and line.
  const auto csv =
      std::filesystem::temp_directory_path() / ("cgp-enrol-" + std::to_string(::getpid()) + ".csv");
  std::ofstream(csv) << "good," << std::string(64, 'a') << "\nbad id," << std::string(64, 'a')
                     << "\n";
  auto enrolled = transport::read_enrolment(csv.string());
  std::filesystem::remove(csv);
  REQUIRE_FALSE(enrolled.has_value());
  CHECK(enrolled.error().message.find(":2:") != std::string::npos);
  CHECK(protocol::log_value("q-1") == "q-1");
  CHECK(protocol::log_value("") == "\"\"");
  CHECK(protocol::log_value("a b\n\"c\\") == "\"a b\\n\\\"c\\\\\"");
  CHECK(protocol::log_value(std::string("\x01", 1)) == "\"\\x01\"");
}

TEST_CASE("wire: a second gateway on a port in use refuses to start, by name",
          "[transport][wire]") {
  // With gRPC's default SO_REUSEPORT the second one started and took part of
  // the traffic (6 of 10 status calls reached the empty instance).
  auto first = transport::DeviceGateway::start("127.0.0.1:0");
  REQUIRE(first.has_value());
  const std::string address = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = transport::DeviceGateway::start(address);
  REQUIRE_FALSE(second.has_value());
  CHECK(second.error().parameter == "listen");
  CHECK(second.error().message.find("in use") != std::string::npos);
  // Once the first is gone, the port can be used again (a coordinator restart).
  first->reset();
  auto again = transport::DeviceGateway::start(address);
  CHECK(again.has_value());
}

TEST_CASE("wire: a connection that never says Hello is ended after the hello timeout",
          "[transport][wire]") {
  transport::GatewayOptions options;
  options.hello_timeout = 300ms;
  auto gateway = *transport::DeviceGateway::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());
  HandStream good(address, "good");  // says Hello at once: unaffected
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = v1::DeviceGateway::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 20s);
  const auto opened = std::chrono::steady_clock::now();
  auto silent = stub->Connect(&context);
  v1::CoordinatorToDevice ignored;
  CHECK_FALSE(silent->Read(&ignored));  // the gateway ends the stream
  const auto status = silent->Finish();
  CHECK(status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK(std::chrono::steady_clock::now() - opened < 10s);
  CHECK(gateway->counters().refused_connections == 1);
  CHECK(gateway->connected() == 1);
  CHECK(good.close().ok());
}

TEST_CASE("wire: a Hello that comes as its stream times out is refused or admitted and not both",
          "[transport][wire]") {
  // The watchdog takes a stream out and ends it outside its lock: a Hello read in between was
  // admitted too (counted refused and connected, and Welcomed on a stream being ended). Streams
  // say Hello around the timeout, each at its own seeded delay; every stream must come out
  // one way, and the counters must add up to the streams. (Against the old gateway, 3 seeds of
  // 40 failed: a guard that catches a return of the race in some runs, not in every one.)
  CGP_SEEDED(4417);
  transport::GatewayOptions options;
  options.hello_timeout = 100ms;  // the watchdog looks every 25 ms: streams end 100-125 ms in
  auto gateway = *transport::DeviceGateway::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());
  constexpr std::size_t kStreams = 48;
  std::mt19937_64 rng(seed);
  std::vector<std::chrono::milliseconds> delays;
  for (std::size_t i = 0; i < kStreams; ++i)
    delays.emplace_back(std::uniform_int_distribution<int>(60, 160)(rng));
  std::vector<int> welcomed(kStreams, 0), ended_late(kStreams, 0);
  std::vector<std::string> endings(kStreams);
  {
    std::vector<std::jthread> streams;
    for (std::size_t i = 0; i < kStreams; ++i)
      streams.emplace_back([&, i] {
        grpc::ChannelArguments arguments;
        arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
        auto channel =
            grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), arguments);
        // Connected first: Debian's gRPC 1.51 client fails about one connect in 850 in a fresh
        // process before the gateway sees a stream (it reads connect()'s errno after other
        // calls: "failed to connect to all addresses ... No such file or directory"), and such
        // a stream would end neither way.
        if (!channel->WaitForConnected(std::chrono::system_clock::now() + 20s)) {
          endings[i] = "never connected";
          return;
        }
        auto stub = v1::DeviceGateway::NewStub(channel);
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + 30s);
        auto stream = stub->Connect(&context);
        std::this_thread::sleep_for(delays[i]);
        v1::DeviceToCoordinator hello;
        hello.mutable_hello()->set_device_id("late-" + std::to_string(i));
        hello.mutable_hello()->set_protocol_version(wire::kProtocolVersion);
        stream->Write(hello);  // fails where the stream has already ended
        v1::CoordinatorToDevice first;
        welcomed[i] = stream->Read(&first) && first.has_welcome();
        stream->WritesDone();
        v1::CoordinatorToDevice ignored;
        while (stream->Read(&ignored)) {
        }
        const grpc::Status ended = stream->Finish();
        ended_late[i] = ended.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
        endings[i] = std::to_string(ended.error_code()) + " " + ended.error_message();
      });
  }
  std::size_t admitted = 0, refused = 0;
  for (std::size_t i = 0; i < kStreams; ++i) {
    INFO("stream " << i << ", Hello after " << delays[i].count() << " ms, ended " << endings[i]);
    CHECK(welcomed[i] + ended_late[i] == 1);  // a Welcomed stream ends as its device closes it
    admitted += welcomed[i];
    refused += ended_late[i];
  }
  const auto counters = gateway->counters();
  CHECK(counters.connects == admitted);
  CHECK(counters.refused_connections == refused);
  CHECK(counters.connects + counters.refused_connections == kStreams);
}

TEST_CASE("wire: the gateway logs why a reply did not count, by device and cause",
          "[transport][wire]") {
  // A device written by another team is debugged from the coordinator's log: each reply that
  // did not count says why (docs/protocol.md §4), where it used to be counted unanswered
  // without a word.
  LogLines log;
  transport::GatewayOptions options;
  options.log = log.sink();
  auto gateway = std::move(*transport::DeviceGateway::start(options));
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());
  const std::vector<std::string> ids{"short", "nan", "rejects", "unset", "good"};
  std::vector<std::unique_ptr<HandStream>> devices;
  for (const auto& id : ids) devices.push_back(std::make_unique<HandStream>(address, id));
  HandStream stranger(address, "stranger");
  REQUIRE(gateway->wait_for_devices(ids.size() + 1, 10s));

  transport::NetworkFleet fleet(*gateway, ids, 2, 1.0, 5s);
  std::vector<coordinator::UserId> users{0, 1, 2, 3, 4};
  std::vector<double> rho(users.size(), 0.01);
  coordinator::RoundRequest request;
  request.query_id = "causes";
  request.users = users;
  request.rho = rho;
  std::jthread answering([&] {
    for (std::size_t d = 0; d < devices.size(); ++d) {
      v1::CoordinatorToDevice pushed;
      REQUIRE(devices[d]->stream->Read(&pushed));
      REQUIRE(pushed.has_request());
      v1::DeviceToCoordinator message;
      auto* reply = message.mutable_reply();
      *reply->mutable_id() = pushed.request().id();
      reply->set_status(v1::ANSWERED);
      reply->set_charged_rho(0.01);
      reply->set_remaining_budget(0.5);
      reply->add_values(1);
      reply->add_values(2);
      if (ids[d] == "short") reply->mutable_values()->RemoveLast();
      if (ids[d] == "nan") reply->set_values(1, std::nan(""));
      if (ids[d] == "rejects") {
        reply->set_status(v1::REJECTED_INVALID);
        reply->clear_values();
        reply->set_error(v1::UNKNOWN_COMPONENT);
        reply->set_error_message("component_id 'location' is not registered on this device");
      }
      if (ids[d] == "unset") reply->clear_remaining_budget();
      REQUIRE(devices[d]->stream->Write(message));
      if (d == 0) {  // a device the round never asked answers the same id
        REQUIRE(stranger.stream->Write(message));
      }
    }
  });
  coordinator::RoundReplies replies;
  fleet.ask(request, replies);
  answering.join();
  CHECK(replies.kind[0] == coordinator::ReplyKind::no_answer);
  CHECK(replies.kind[1] == coordinator::ReplyKind::no_answer);
  CHECK(replies.kind[2] == coordinator::ReplyKind::rejected);
  CHECK(replies.kind[3] == coordinator::ReplyKind::answered);
  CHECK(replies.kind[4] == coordinator::ReplyKind::answered);

  CHECK_FALSE(log.find({"event=reply-unusable", "device=short", "cause=dimension", "values=1",
                        "expected=2"})
                  .empty());
  CHECK_FALSE(log.find({"event=reply-unusable", "device=nan", "cause=not-finite"}).empty());
  CHECK_FALSE(log.find({"event=reply-rejected", "device=rejects", "error=UNKNOWN_COMPONENT",
                        "not registered on this device"})
                  .empty());
  CHECK_FALSE(log.find({"event=device-exhausted", "device=unset", "remaining_budget=0",
                        "unset remaining_budget reads as 0"})
                  .empty());
  CHECK_FALSE(log.find({"event=reply-unmatched", "device=stranger", "query=causes"}).empty());
  CHECK_FALSE(log.find({"event=reply-missing", "device=short", "query=causes", "round=1"}).empty());
  CHECK(log.find({"event=reply-missing", "device=rejects"}).empty());  // it answered: rejected
  {
    std::lock_guard lock(log.mutex);
    for (const auto& line : log.lines)  // the good answer is not a cause
      CHECK_FALSE((line.find("event=reply") == 0 && line.find("device=good") != std::string::npos));
  }

  // A message that does not parse after an accepted Hello ends that stream by name, logged.
  v1::DeviceToCoordinator hello;
  hello.mutable_hello()->set_device_id("garbled");
  hello.mutable_hello()->set_protocol_version(wire::kProtocolVersion);
  const auto status =
      send_raw(address, {hello.SerializeAsString(), std::string("\xff\xff\xff\xff\x0f junk", 11)});
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_FALSE(log.find({"event=refused", "reason=malformed-message", "device=garbled"}).empty());
  for (auto& device : devices) CHECK(device->close().ok());
  CHECK(stranger.close().ok());
}
