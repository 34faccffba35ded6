#include "swarm_core.hpp"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>

#include "cgp/common/version.hpp"
#include "cgp/common/wire/limits.hpp"
#include "cgp/link/watch_admission.hpp"
#include "cgp/v1/cgp.pb.h"

namespace cgp::swarm {
namespace {

constexpr std::uint8_t kReplyTag = (2 << 3) | 2;  // DeviceToCoordinator.reply, length-delimited
constexpr std::uint8_t kWatchStartedTag = (4 << 3) | 2;  // DeviceToCoordinator.watch_started

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// DeviceToCoordinator{<field> = bytes}: tag, varint length, bytes.
std::string envelope_of(std::uint8_t tag, const std::string& bytes) {
  std::string envelope;
  envelope.reserve(bytes.size() + 6);
  envelope.push_back(static_cast<char>(tag));
  for (std::size_t n = bytes.size();; n >>= 7) {
    envelope.push_back(static_cast<char>(n < 0x80 ? n : (n & 0x7f) | 0x80));
    if (n < 0x80) break;
  }
  envelope += bytes;
  return envelope;
}

std::span<const std::uint8_t> bytes_of(std::string_view body) {
  return {reinterpret_cast<const std::uint8_t*>(body.data()), body.size()};
}

}  // namespace

bool envelope_body(std::string_view bytes, int& field, std::string_view& body) {
  using google::protobuf::internal::WireFormatLite;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  field = 0;
  for (std::uint32_t tag; (tag = in.ReadTag()) != 0;) {
    if (WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::SkipField(&in, tag)) return false;
      continue;
    }
    std::uint32_t length = 0;
    const void* data = nullptr;
    int available = 0;
    if (!in.ReadVarint32(&length)) return false;
    if (length == 0) {  // an empty body (a Goodbye with no fields): nothing to point into
      field = static_cast<int>(WireFormatLite::GetTagFieldNumber(tag));
      body = {};
      continue;
    }
    if (!in.GetDirectBufferPointer(&data, &available) ||
        static_cast<std::uint32_t>(available) < length)
      return false;
    field = static_cast<int>(WireFormatLite::GetTagFieldNumber(tag));
    body = {static_cast<const char*>(data), length};
    in.Skip(static_cast<int>(length));
  }
  return field != 0;
}

std::string hello_envelope(const SwarmMember& member) {
  v1::DeviceToCoordinator hello;
  hello.mutable_hello()->set_device_id(member.id);
  hello.mutable_hello()->set_protocol_version(wire::kProtocolVersion);
  hello.mutable_hello()->set_sdk_version(std::string(version_string()));
  hello.mutable_hello()->set_credential(member.credential);
  return hello.SerializeAsString();
}

std::string DeviceAnswerer::answer_request(std::string_view body) {
  ++swarm_.requests;
  Member& member = *swarm_.members[index_];
  std::string reply;
  {
    std::lock_guard lock(member.device_mutex);
    reply = member.device.handle(bytes_of(body));
  }
  return envelope_of(kReplyTag, reply);
}

// Watches run as on cgp-device (device_client.cpp): armed on the device, ticked on their public
// schedule, one alert each.
bool DeviceAnswerer::start_watch(std::string_view body, const Send& send) {
  Member& member = *swarm_.members[index_];
  link::WatchAnswer answer;
  {
    std::lock_guard lock(member.device_mutex);
    answer = link::answer_start_watch(member.device, bytes_of(body), swarm_.options.watch_limits,
                                      watches_.size(), unix_now());
  }
  send(envelope_of(kWatchStartedTag, answer.started), false);
  if (answer.recorded_alert() != 0) {
    send_alert(answer.watch_id, answer.recorded_alert(), send);
    return false;
  }
  if (!answer.ticks()) return false;
  watches_.add(answer.watch_id, answer.state->spec, answer.state->last_tick);
  return true;
}

void DeviceAnswerer::send_alert(const std::string& watch_id, std::uint64_t tick, const Send& send) {
  v1::DeviceToCoordinator alert;
  alert.mutable_watch_alert()->set_watch_id(watch_id);
  alert.mutable_watch_alert()->set_tick(tick);
  send(alert.SerializeAsString(), false);
}

std::optional<double> DeviceAnswerer::tick_watches(const Send& send) {
  Member& member = *swarm_.members[index_];
  watches_.tick_due(unix_now(), [&](const std::string& id, std::uint64_t tick) {
    Expected<WatchTickStatus> status = WatchTickStatus::finished;
    {
      std::lock_guard lock(member.device_mutex);
      status = member.device.tick_watch(id, tick);
    }
    if (status && *status == WatchTickStatus::alert) send_alert(id, tick, send);
    return status && *status == WatchTickStatus::silent;
  });
  if (watches_.empty()) return std::nullopt;
  const double now = unix_now();
  return std::max(watches_.next_due(now) - now, 0.001);
}

}  // namespace cgp::swarm
