// The swarm over the lean frames transport (docs/protocol.md §2b): each device on a TLS 1.3
// connection of its own (ALPN cgp-frames/1), non-blocking, with OpenSSL directly on the socket;
// all connections driven by a fixed set of epoll loops (completion_queues of them), a device
// always on the same loop, which alone touches its connection. Other threads (drop, reconnect,
// the destructor) post commands to a loop and wake it.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <queue>
#include <random>
#include <thread>

#include "cgp/common/wire/limits.hpp"
#include "cgp/protocol/device_frames.hpp"
#include "cgp/protocol/frames_tls.hpp"
#include "cgp/protocol/virtual_shard.hpp"
#include "cgp/v1/cgp.pb.h"
#include "cgp/v1/device_frames.pb.h"
#include "swarm_core.hpp"

namespace cgp::swarm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr Clock::time_point kNever = Clock::time_point::max();

// StreamEnd.code is a gRPC status code number (device_frames.proto).
constexpr std::uint32_t kCodeOk = 0, kCodeCancelled = 1, kCodeInvalidArgument = 3,
                        kCodeFailedPrecondition = 9, kCodeUnauthenticated = 16;

// How a connection ended, for the counters and the redial.
enum class Ending : std::uint8_t {
  cut,            // by the swarm (drop, no Welcome in time, stopping): counted nowhere
  closed,         // by the coordinator with StreamEnd OK or CANCELLED (replaced): nowhere
  refused,        // a failed TLS handshake (certificate, ALPN): refused, dialled again
  refused_final,  // StreamEnd UNAUTHENTICATED, INVALID_ARGUMENT or FAILED_PRECONDITION: the
                  // same Hello would be refused again, so the device stays down
  lost,           // anything else: a failed dial, a plain close, a reset, another StreamEnd
};

// ±20%, so that a fleet that lost its coordinator at one moment does not redial in lockstep.
std::chrono::milliseconds jittered(std::chrono::milliseconds wait, std::minstd_rand& rng) {
  std::uniform_real_distribution<double> factor(0.8, 1.2);
  return std::chrono::milliseconds(
      static_cast<std::chrono::milliseconds::rep>(static_cast<double>(wait.count()) * factor(rng)));
}

// One device's connection. Touched only by its loop's thread.
struct Connection {
  enum class State : std::uint8_t { idle, connecting, handshaking, open };

  Connection(SwarmCore& swarm, std::size_t index) : answerer(swarm, index) {}

  // Appends a frame of kind message around an envelope the device built at the byte level (see
  // swarm_core.hpp: it is not parsed again to go through append_frame).
  void queue(std::string_view envelope, bool is_reply) {
    if (envelope.size() > wire::kMaxMessageBytes) return;  // the coordinator would refuse it
    const auto length = static_cast<std::uint32_t>(envelope.size() + 1);
    const char header[protocol::kFrameHeaderBytes + 1] = {
        static_cast<char>(length >> 24), static_cast<char>(length >> 16),
        static_cast<char>(length >> 8), static_cast<char>(length),
        static_cast<char>(protocol::FrameKind::message)};
    out.append(header, sizeof header);
    out.append(envelope);
    if (is_reply) ++replies_out;
  }

  State state = State::idle;
  int fd = -1;
  // Bumped at every dial and carried in the fd's epoll events: an event of an earlier socket
  // is ignored.
  std::uint32_t generation = 0;
  std::uint32_t interest = 0;  // the epoll events asked for
  bool registered = false;     // fd is in the loop's epoll set
  bool read_wants_write = false;
  bool welcomed = false;
  protocol::Ssl ssl;
  protocol::FrameReader reader;   // holds no buffer between frames
  std::string out;                // frames SSL_write has not taken yet; released when empty
  std::uint32_t replies_out = 0;  // replies in `out`: counted once written
  Clock::time_point dialled{};
  Clock::time_point watch_due = kNever;
  Clock::time_point deadline = kNever;  // its timer in the loop (kNever: none)
  DeviceAnswerer answerer;
  const DeviceAnswerer::Send send = [this](std::string envelope, bool is_reply) {
    queue(envelope, is_reply);
  };
};

struct Command {
  enum class Kind : std::uint8_t { dial, cut } kind;
  std::size_t index;
};

struct Timer {
  Clock::time_point when;
  std::size_t index;
  bool operator>(const Timer& other) const { return when > other.when; }
};

constexpr std::uint64_t kWakeEvent = ~std::uint64_t{0};
constexpr std::uint32_t kReadable = EPOLLIN, kWritable = EPOLLOUT;

struct Loop {
  ~Loop() {
    if (epoll >= 0) ::close(epoll);
    if (wake >= 0) ::close(wake);
  }
  int epoll = -1, wake = -1;
  std::thread thread;
  std::mutex mutex;  // guards commands and stop
  std::vector<Command> commands;
  bool stop = false;
  // Its connections' timers (dial, Welcome timeout, watch tick); an entry whose time is no
  // longer its connection's deadline is stale and skipped.
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers;
  std::minstd_rand rng{std::random_device{}()};
  std::array<char, 16384> read_buffer{};
};

class FrameTransport final : public SwarmTransport {
 public:
  FrameTransport(SwarmCore& swarm, protocol::SslContext context, std::string host,
                 const sockaddr_storage& address, socklen_t address_length)
      : swarm_(swarm),
        context_(std::move(context)),
        host_(std::move(host)),
        address_(address),
        address_length_(address_length) {
    connections_.reserve(swarm.members.size());
    for (std::size_t i = 0; i < swarm.members.size(); ++i)
      connections_.push_back(std::make_unique<Connection>(swarm, i));
  }
  ~FrameTransport() override;
  Status start();
  void drop(std::size_t i) override;
  bool reconnect(std::size_t i) override;
  void set_shard_hosts(std::vector<std::string> hosts) { shard_hosts_ = std::move(hosts); }

 private:
  Loop& loop_of(std::size_t i) { return *loops_[i % loops_.size()]; }
  void post(std::size_t i, Command::Kind kind);
  void run(Loop& loop, std::size_t first);

  // On the loop's thread:
  void dial(Loop& loop, std::size_t i, bool due_only);
  void on_event(Loop& loop, std::size_t i, std::uint32_t generation, std::uint32_t events);
  void finish_connect(Loop& loop, std::size_t i);
  void handshake(Loop& loop, std::size_t i);
  void read(Loop& loop, std::size_t i);
  bool take_frames(Loop& loop, std::size_t i);
  void on_message(Loop& loop, std::size_t i, std::string_view envelope);
  void tick_watches(Loop& loop, std::size_t i);
  void flush(Loop& loop, std::size_t i);
  void end(Loop& loop, std::size_t i, Ending ending, std::uint32_t retry_after_ms = 0);
  void on_timer(Loop& loop, std::size_t i, Clock::time_point now);
  void record_retry_after(Loop& loop, std::size_t i, std::uint32_t retry_after_ms);
  void set_interest(std::size_t i, std::uint32_t events);
  void set_timer(Loop& loop, std::size_t i, Clock::time_point when);
  void schedule(Loop& loop, std::size_t i);

  SwarmCore& swarm_;
  protocol::SslContext context_;
  std::string host_;  // checked against the coordinator's certificate
  // Device i's TLS name: its shard's host under SwarmOptions::address_template, or host_.
  std::vector<std::string> shard_hosts_;
  const std::string& host_of(std::size_t i) const {
    return shard_hosts_.empty() ? host_ : shard_hosts_[i];
  }
  sockaddr_storage address_;
  socklen_t address_length_;
  std::vector<std::unique_ptr<Connection>> connections_;  // device i's, on loop i % loops
  std::vector<std::unique_ptr<Loop>> loops_;
};

Status FrameTransport::start() {
  const std::size_t loops = std::min(swarm_.options.completion_queues, swarm_.members.size());
  for (std::size_t l = 0; l < loops; ++l) {
    auto loop = std::make_unique<Loop>();
    loop->epoll = epoll_create1(EPOLL_CLOEXEC);
    loop->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_event wake{kReadable, {}};
    wake.data.u64 = kWakeEvent;
    if (loop->epoll < 0 || loop->wake < 0 ||
        epoll_ctl(loop->epoll, EPOLL_CTL_ADD, loop->wake, &wake) != 0)
      return make_error(
          ErrorCode::unavailable, "completion_queues",
          std::string("completion_queues: cannot make an epoll loop: ") + std::strerror(errno));
    loops_.push_back(std::move(loop));
  }
  for (std::size_t l = 0; l < loops_.size(); ++l)
    loops_[l]->thread = std::thread([this, l] { run(*loops_[l], l); });
  return {};
}

FrameTransport::~FrameTransport() {
  {
    std::lock_guard lock(swarm_.mutex);
    swarm_.stopping = true;  // nothing is dialled from now on; reconnect() waits no longer
  }
  swarm_.changed.notify_all();
  for (auto& loop : loops_) {
    {
      std::lock_guard lock(loop->mutex);
      loop->stop = true;
    }
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto written = ::write(loop->wake, &one, sizeof one);
  }
  for (auto& loop : loops_)
    if (loop->thread.joinable()) loop->thread.join();
}

void FrameTransport::post(std::size_t i, Command::Kind kind) {
  Loop& loop = loop_of(i);
  {
    std::lock_guard lock(loop.mutex);
    loop.commands.push_back({kind, i});
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = ::write(loop.wake, &one, sizeof one);
}

void FrameTransport::drop(std::size_t i) {
  {
    std::lock_guard lock(swarm_.mutex);
    swarm_.members[i]->wanted = false;  // down until reconnect(i)
  }
  post(i, Command::Kind::cut);
}

bool FrameTransport::reconnect(std::size_t i) {
  Member& member = *swarm_.members[i];
  {
    std::unique_lock lock(swarm_.mutex);
    member.wanted = true;
    if (!swarm_.changed.wait_for(lock, std::chrono::seconds(30),
                                 [&] { return member.done || swarm_.stopping; }))
      return false;
    if (swarm_.stopping) return true;
  }
  post(i, Command::Kind::dial);
  return true;
}

void FrameTransport::run(Loop& loop, std::size_t first) {
  // A write to a socket the coordinator closed raises SIGPIPE in the writing thread (OpenSSL
  // writes with write(2), not send(MSG_NOSIGNAL)); blocked here, it stays pending on this thread
  // and the write fails with EPIPE, without changing the process's signal handling.
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);

  for (std::size_t i = first; i < connections_.size(); i += loops_.size()) dial(loop, i, false);
  std::array<epoll_event, 256> events{};
  std::vector<Command> commands;
  for (;;) {
    int timeout = -1;
    while (!loop.timers.empty() &&
           connections_[loop.timers.top().index]->deadline != loop.timers.top().when)
      loop.timers.pop();
    if (!loop.timers.empty()) {
      const auto wait =
          std::chrono::ceil<std::chrono::milliseconds>(loop.timers.top().when - Clock::now());
      timeout =
          static_cast<int>(std::clamp<std::chrono::milliseconds::rep>(wait.count(), 0, 60000));
    }
    const int ready =
        epoll_wait(loop.epoll, events.data(), static_cast<int>(events.size()), timeout);
    for (int e = 0; e < ready; ++e) {
      const std::uint64_t data = events[static_cast<std::size_t>(e)].data.u64;
      if (data == kWakeEvent) {
        std::uint64_t count = 0;
        [[maybe_unused]] const auto taken = ::read(loop.wake, &count, sizeof count);
        continue;
      }
      on_event(loop, static_cast<std::size_t>(data & 0xffffffffu),
               static_cast<std::uint32_t>(data >> 32), events[static_cast<std::size_t>(e)].events);
    }
    bool stop = false;
    {
      std::lock_guard lock(loop.mutex);
      stop = loop.stop;
      commands.swap(loop.commands);
    }
    if (stop) break;
    for (const Command& command : commands) {
      if (command.kind == Command::Kind::cut) {
        if (connections_[command.index]->state != Connection::State::idle)
          end(loop, command.index, Ending::cut);
      } else {
        dial(loop, command.index, false);
      }
    }
    commands.clear();
    const auto now = Clock::now();
    while (!loop.timers.empty() && loop.timers.top().when <= now) {
      const Timer timer = loop.timers.top();
      loop.timers.pop();
      if (connections_[timer.index]->deadline == timer.when) on_timer(loop, timer.index, now);
    }
  }
  for (std::size_t i = first; i < connections_.size(); i += loops_.size())
    if (connections_[i]->state != Connection::State::idle) end(loop, i, Ending::cut);
}

void FrameTransport::set_interest(std::size_t i, std::uint32_t wanted) {
  Connection& c = *connections_[i];
  if (c.registered && c.interest == wanted) return;
  epoll_event event{wanted, {}};
  event.data.u64 = (std::uint64_t{c.generation} << 32) | static_cast<std::uint32_t>(i);
  if (epoll_ctl(loop_of(i).epoll, c.registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c.fd, &event) ==
      0) {
    c.registered = true;
    c.interest = wanted;
  }
  // Otherwise (out of memory) the connection hears nothing and is cut at its Welcome timeout,
  // or the next write tries again.
}

void FrameTransport::set_timer(Loop& loop, std::size_t i, Clock::time_point when) {
  Connection& c = *connections_[i];
  if (c.deadline == when) return;
  c.deadline = when;
  if (when != kNever) loop.timers.push({when, i});
}

// A connection's next timer: its Welcome timeout until welcomed, then its next watch tick.
void FrameTransport::schedule(Loop& loop, std::size_t i) {
  const Connection& c = *connections_[i];
  if (c.state == Connection::State::idle) return;
  const Clock::time_point welcome_by = c.welcomed ? kNever : c.dialled + kWelcomeTimeout;
  set_timer(loop, i, std::min(welcome_by, c.watch_due));
}

void FrameTransport::dial(Loop& loop, std::size_t i, bool due_only) {
  Connection& c = *connections_[i];
  Member& member = *swarm_.members[i];
  const auto now = Clock::now();
  {
    std::lock_guard lock(swarm_.mutex);
    if (swarm_.stopping || !member.done || !member.wanted || c.state != Connection::State::idle)
      return;
    Clock::time_point not_before = due_only ? member.next_dial : Clock::time_point{};
    // The coordinator's window holds for every dial, reconnect(i) included.
    if (swarm_.options.obey_retry_after) not_before = std::max(not_before, member.retry_not_before);
    if (now < not_before) return set_timer(loop, i, not_before);
    member.done = false;
    member.welcomed = false;
    member.dialled = now;
  }
  c.deadline = kNever;
  c.dialled = now;
  ++c.generation;
  c.registered = false;
  c.interest = 0;
  c.fd = ::socket(address_.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
  if (c.fd < 0) return end(loop, i, Ending::lost);  // out of descriptors: backs off like a refusal
  c.state = Connection::State::connecting;
  protocol::tune_frames_socket(c.fd);  // as a device dials (frames_tls.hpp)
  auto session = protocol::frames_client_session(context_.get(), c.fd, host_of(i));
  if (!session) return end(loop, i, Ending::lost);
  c.ssl = std::move(*session);
  if (::connect(c.fd, reinterpret_cast<const sockaddr*>(&address_), address_length_) == 0) {
    c.state = Connection::State::handshaking;
    schedule(loop, i);
    return handshake(loop, i);
  }
  if (errno != EINPROGRESS) return end(loop, i, Ending::lost);  // ECONNREFUSED and the like
  set_interest(i, kWritable);
  schedule(loop, i);
}

void FrameTransport::on_event(Loop& loop, std::size_t i, std::uint32_t generation,
                              std::uint32_t events) {
  if (i >= connections_.size()) return;
  Connection& c = *connections_[i];
  if (c.fd < 0 || c.generation != generation) return;
  switch (c.state) {
    case Connection::State::idle:
      return;
    case Connection::State::connecting:
      return finish_connect(loop, i);
    case Connection::State::handshaking:
      return handshake(loop, i);
    case Connection::State::open:
      if (events & EPOLLOUT) {
        if (c.read_wants_write) {
          c.read_wants_write = false;
          read(loop, i);
        }
        if (c.state != Connection::State::open) return;
        flush(loop, i);
      }
      if (c.state == Connection::State::open && (events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
        read(loop, i);
      return;
  }
}

void FrameTransport::finish_connect(Loop& loop, std::size_t i) {
  Connection& c = *connections_[i];
  int error = 0;
  socklen_t length = sizeof error;
  if (getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0)
    return end(loop, i, Ending::lost);
  c.state = Connection::State::handshaking;
  handshake(loop, i);
}

void FrameTransport::handshake(Loop& loop, std::size_t i) {
  Connection& c = *connections_[i];
  ERR_clear_error();
  const int done = SSL_do_handshake(c.ssl.get());
  if (done == 1) {
    if (!protocol::frames_alpn_agreed(c.ssl.get())) return end(loop, i, Ending::refused);
    c.state = Connection::State::open;
    c.queue(hello_envelope(swarm_.members[i]->spec), false);
    flush(loop, i);
    // The Welcome may have come with the handshake's last flight and wait inside OpenSSL,
    // where epoll does not see it.
    if (c.state == Connection::State::open) read(loop, i);
    return;
  }
  switch (SSL_get_error(c.ssl.get(), done)) {
    case SSL_ERROR_WANT_READ:
      return set_interest(i, kReadable);
    case SSL_ERROR_WANT_WRITE:
      return set_interest(i, kWritable);
    case SSL_ERROR_SSL: {
      // The coordinator closing or resetting mid-handshake (at a limit, restarting) is a lost
      // connection; a certificate that does not verify or an alert (no ALPN) is a refusal.
      const auto reason = ERR_GET_REASON(ERR_peek_error());
      ERR_clear_error();
      return end(loop, i,
                 reason == SSL_R_UNEXPECTED_EOF_WHILE_READING ? Ending::lost : Ending::refused);
    }
    default:
      ERR_clear_error();
      return end(loop, i, Ending::lost);
  }
}

void FrameTransport::read(Loop& loop, std::size_t i) {
  Connection& c = *connections_[i];
  for (;;) {
    ERR_clear_error();
    const int got =
        SSL_read(c.ssl.get(), loop.read_buffer.data(), static_cast<int>(loop.read_buffer.size()));
    if (got > 0) {
      c.reader.append(loop.read_buffer.data(), static_cast<std::size_t>(got));
      if (!take_frames(loop, i)) return;  // the connection ended
      continue;
    }
    const int error = SSL_get_error(c.ssl.get(), got);
    if (error == SSL_ERROR_WANT_READ) break;
    if (error == SSL_ERROR_WANT_WRITE) {  // a TLS key update to answer first
      c.read_wants_write = true;
      set_interest(i, kReadable | kWritable);
      break;
    }
    // Closed without a StreamEnd (close_notify, EOF, reset): lost, as a gRPC stream that
    // ends UNAVAILABLE.
    ERR_clear_error();
    return end(loop, i, Ending::lost);
  }
  c.reader.compact();
  flush(loop, i);
}

// Takes the whole frames read so far; false if the connection ended (a StreamEnd, a malformed
// frame).
bool FrameTransport::take_frames(Loop& loop, std::size_t i) {
  Connection& c = *connections_[i];
  for (;;) {
    auto next = c.reader.next();
    if (!next) {
      end(loop, i, Ending::lost);
      return false;
    }
    if (!*next) return true;
    const protocol::Frame frame = **next;
    if (frame.kind == protocol::FrameKind::end) {
      v1::StreamEnd stream_end;
      if (!stream_end.ParseFromArray(frame.body.data(), static_cast<int>(frame.body.size()))) {
        end(loop, i, Ending::lost);
        return false;
      }
      const std::uint32_t code = stream_end.code();
      const Ending ending =
          code == kCodeUnauthenticated || code == kCodeInvalidArgument ||
                  code == kCodeFailedPrecondition
              ? Ending::refused_final
              : (code == kCodeOk || code == kCodeCancelled ? Ending::closed : Ending::lost);
      end(loop, i, ending, stream_end.retry_after_ms());
      return false;
    }
    on_message(loop, i, frame.body);
  }
}

void FrameTransport::on_message(Loop& loop, std::size_t i, std::string_view envelope) {
  Connection& c = *connections_[i];
  int field = 0;
  std::string_view body;
  if (!envelope_body(envelope, field, body)) return;  // ignored, as over gRPC
  if (field == kBodyWelcome) {
    if (c.welcomed) return;
    c.welcomed = true;
    swarm_.on_welcome(i);
    schedule(loop, i);  // no Welcome timeout any more
  } else if (field == kBodyRequest) {
    c.queue(c.answerer.answer_request(body), true);
  } else if (field == kBodyStartWatch) {
    if (c.answerer.start_watch(body, c.send)) tick_watches(loop, i);
  } else if (field == kBodyGoodbye) {
    v1::Goodbye goodbye;
    if (goodbye.ParseFromArray(body.data(), static_cast<int>(body.size())))
      record_retry_after(loop, i, goodbye.retry_after_ms());
  }
}

// Watches tick on the loop, woken by the connection's timer.
void FrameTransport::tick_watches(Loop& loop, std::size_t i) {
  Connection& c = *connections_[i];
  const auto wait = c.answerer.tick_watches(c.send);
  c.watch_due = wait ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(*wait))
                     : kNever;
  schedule(loop, i);
}

void FrameTransport::flush(Loop& loop, std::size_t i) {
  Connection& c = *connections_[i];
  while (!c.out.empty()) {
    ERR_clear_error();
    const int wrote = SSL_write(c.ssl.get(), c.out.data(),
                                static_cast<int>(std::min<std::size_t>(c.out.size(), 1 << 20)));
    if (wrote > 0) {
      c.out.erase(0, static_cast<std::size_t>(wrote));
      continue;
    }
    const int error = SSL_get_error(c.ssl.get(), wrote);
    if (error == SSL_ERROR_WANT_WRITE) return set_interest(i, kReadable | kWritable);
    if (error == SSL_ERROR_WANT_READ) return set_interest(i, kReadable);
    ERR_clear_error();
    return end(loop, i, Ending::lost);
  }
  std::string().swap(c.out);  // an idle connection keeps no buffer
  swarm_.replies += c.replies_out;
  c.replies_out = 0;
  set_interest(i, c.read_wants_write ? kReadable | kWritable : kReadable);
}

void FrameTransport::record_retry_after(Loop& loop, std::size_t i, std::uint32_t retry_after_ms) {
  if (retry_after_ms == 0) return;
  // The coordinator spreads its devices' windows; the device adds up to 10% so that those given
  // one window do not all come back on the same millisecond.
  std::uniform_real_distribution<double> spread(1.0, 1.1);
  const auto window = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::milli>(retry_after_ms * spread(loop.rng)));
  const auto until = Clock::now() + window;
  std::lock_guard lock(swarm_.mutex);
  Member& member = *swarm_.members[i];
  member.retry_not_before = std::max(member.retry_not_before, until);
}

void FrameTransport::end(Loop& loop, std::size_t i, Ending ending, std::uint32_t retry_after_ms) {
  Connection& c = *connections_[i];
  const bool was_welcomed = c.welcomed;
  c.ssl.reset();
  if (c.fd >= 0) ::close(c.fd);  // also takes it out of the epoll set
  c.fd = -1;
  c.state = Connection::State::idle;
  c.registered = false;
  c.interest = 0;
  c.read_wants_write = false;
  c.welcomed = false;
  c.reader = {};
  std::string().swap(c.out);
  c.replies_out = 0;
  c.answerer.clear_watches();  // the coordinator sends them again on the next connection
  c.watch_due = kNever;
  if (ending == Ending::refused || ending == Ending::refused_final)
    ++swarm_.refused;
  else if (ending == Ending::lost)
    ++swarm_.lost;
  record_retry_after(loop, i, retry_after_ms);
  Clock::time_point dial_at = kNever;
  {
    std::lock_guard lock(swarm_.mutex);
    if (was_welcomed) --swarm_.welcomed;
    Member& member = *swarm_.members[i];
    member.done = true;
    member.welcomed = false;
    if (ending == Ending::refused_final) member.wanted = false;
    // Exponential backoff from 100 ms to 5 s, reset by a Welcome, with jitter; and never
    // before a window the coordinator gave (when obeyed), whatever the backoff says.
    member.backoff = next_backoff(member.backoff, was_welcomed);
    member.next_dial = Clock::now() + jittered(member.backoff, loop.rng);
    if (swarm_.options.obey_retry_after)
      member.next_dial = std::max(member.next_dial, member.retry_not_before);
    if (member.wanted && !swarm_.stopping) dial_at = member.next_dial;
  }
  swarm_.changed.notify_all();
  c.deadline = kNever;
  set_timer(loop, i, dial_at);
}

void FrameTransport::on_timer(Loop& loop, std::size_t i, Clock::time_point now) {
  Connection& c = *connections_[i];
  c.deadline = kNever;
  if (c.state == Connection::State::idle) return dial(loop, i, true);
  // A stalled connection (no answer to the dial, the handshake or the Hello) is cut and
  // dialled again, as a gRPC stream without a Welcome is cancelled.
  if (!c.welcomed && now - c.dialled >= kWelcomeTimeout) return end(loop, i, Ending::cut);
  if (c.watch_due <= now) {
    tick_watches(loop, i);
    flush(loop, i);
  }
  if (c.state != Connection::State::idle) schedule(loop, i);
}

// "host:port" or "[v6]:port": the host (for the certificate check) and its first address.
Expected<std::pair<std::string, std::pair<sockaddr_storage, socklen_t>>> resolve(
    const std::string& address) {
  std::string host, port;
  if (address.starts_with('[')) {
    const auto close = address.find("]:");
    if (close != std::string::npos) {
      host = address.substr(1, close - 1);
      port = address.substr(close + 2);
    }
  } else if (const auto colon = address.rfind(':'); colon != std::string::npos) {
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  if (host.empty() || port.empty())
    return make_error(ErrorCode::invalid_argument, "coordinator_address",
                      "coordinator_address: expected host:port, got '" + address + "'");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int failed = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); failed != 0)
    return make_error(
        ErrorCode::invalid_argument, "coordinator_address",
        "coordinator_address: cannot resolve '" + address + "': " + gai_strerror(failed));
  std::pair<sockaddr_storage, socklen_t> first{};
  std::memcpy(&first.first, found->ai_addr, found->ai_addrlen);
  first.second = found->ai_addrlen;
  freeaddrinfo(found);
  return std::pair{host, first};
}

}  // namespace

Expected<std::unique_ptr<SwarmTransport>> start_frame_transport(SwarmCore& swarm) {
  auto context = protocol::frames_client_context(swarm.options.tls_root_certificate);
  if (!context) return context.error();
  auto where = resolve(swarm.options.coordinator_address);
  if (!where) return where.error();
  std::vector<std::string> shard_hosts;
  if (!swarm.options.address_template.empty()) {
    CGP_RETURN_IF_ERROR(protocol::validate_address_template(swarm.options.address_template));
    if (swarm.options.virtual_shards == 0 ||
        swarm.options.virtual_shards > protocol::kMaxVirtualShards)
      return make_error(ErrorCode::out_of_range, "virtual_shards",
                        "virtual_shards must be in 1.." +
                            std::to_string(protocol::kMaxVirtualShards) +
                            " with an address template");
    for (const auto& member : swarm.members) {
      const std::string address = protocol::shard_address(
          swarm.options.address_template,
          protocol::virtual_shard(member->spec.id, swarm.options.virtual_shards));
      const auto colon = address.rfind(':');
      shard_hosts.push_back(colon == std::string::npos ? address : address.substr(0, colon));
    }
  }
  auto transport = std::make_unique<FrameTransport>(swarm, std::move(*context), where->first,
                                                    where->second.first, where->second.second);
  transport->set_shard_hosts(std::move(shard_hosts));
  CGP_RETURN_IF_ERROR(transport->start());
  return std::unique_ptr<SwarmTransport>(std::move(transport));
}

}  // namespace cgp::swarm
