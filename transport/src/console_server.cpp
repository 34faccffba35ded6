#include "console_server.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "cgp/common/geometry/projection.hpp"
#include "cgp/protocol/frames_tls.hpp"
#include "cgp/protocol/log_format.hpp"
#include "cgp/protocol/status_codec.hpp"
#include "connection_admission.hpp"
#include "console_assets.hpp"
#include "console_http.hpp"
#include "console_json.hpp"
#include "console_sessions.hpp"
#include "query_desk.hpp"

namespace cgp::transport::detail {

namespace {

constexpr const char* kSessionCookie = "cgp_console_session";
constexpr const char* kCsrfHeader = "X-CSRF-Token";
constexpr const char* kJson = "application/json";
constexpr std::size_t kMaxListedResults = 200;

// The kind of an error as the Analyst API names it (its gRPC code), and its HTTP status.
struct Kind {
  const char* name;
  int http;
};
Kind kind_of(ErrorCode code) {
  switch (protocol::grpc_code_of(code)) {
    case grpc::StatusCode::INVALID_ARGUMENT:
      return {"INVALID_ARGUMENT", 400};
    case grpc::StatusCode::OUT_OF_RANGE:
      return {"OUT_OF_RANGE", 400};
    case grpc::StatusCode::NOT_FOUND:
      return {"NOT_FOUND", 404};
    case grpc::StatusCode::ALREADY_EXISTS:
      return {"ALREADY_EXISTS", 409};
    case grpc::StatusCode::FAILED_PRECONDITION:
      return {"FAILED_PRECONDITION", 422};
    case grpc::StatusCode::UNAUTHENTICATED:
      return {"UNAUTHENTICATED", 401};
    case grpc::StatusCode::PERMISSION_DENIED:
      return {"PERMISSION_DENIED", 403};
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return {"RESOURCE_EXHAUSTED", 413};
    case grpc::StatusCode::UNAVAILABLE:
      return {"UNAVAILABLE", 503};
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return {"DEADLINE_EXCEEDED", 504};
    default:
      return {"INTERNAL", 500};
  }
}

void send_error(HttpResponse& res, const Error& error, const char* name, int http) {
  res.status = http;
  res.set_header("Cache-Control", "no-store");
  if (http == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(error_json(error, name), kJson);
}
void send_error(HttpResponse& res, const Error& error) {
  const Kind kind = kind_of(error.code);
  send_error(res, error, kind.name, kind.http);
}

// The value of cookie `name` in the request's Cookie headers, or "".
std::string cookie_value(const HttpRequest& req, std::string_view name) {
  for (const auto& header : req.header_values("Cookie")) {
    std::string_view rest = header;
    while (!rest.empty()) {
      const auto end = rest.find(';');
      std::string_view pair = rest.substr(0, end);
      while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
      const auto equals = pair.find('=');
      if (equals != std::string_view::npos && pair.substr(0, equals) == name)
        return std::string(pair.substr(equals + 1));
      if (end == std::string_view::npos) break;
      rest.remove_prefix(end + 1);
    }
  }
  return {};
}

bool is_json(const HttpRequest& req) {
  std::string type = req.header("Content-Type");
  type = type.substr(0, type.find(';'));
  while (!type.empty() && type.back() == ' ') type.pop_back();
  for (auto& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return type == kJson;
}

}  // namespace

Expected<std::string> tile_origin(const std::string& url) {
  const auto fail = [&](const std::string& why) {
    return make_error(ErrorCode::invalid_argument, "console_tiles",
                      "console_tiles: '" + url + "' " + why);
  };
  std::size_t scheme_end = 0;
  if (url.rfind("https://", 0) == 0)
    scheme_end = 8;
  else if (url.rfind("http://", 0) == 0)
    scheme_end = 7;
  else
    return fail("must start with https:// (or http://)");
  for (const char c : url)
    if (c <= ' ' || c >= 127 || c == '"' || c == '\'' || c == ',' || c == ';' || c == '\\')
      return fail("holds a character a tile URL cannot hold (space, quote, comma, semicolon)");
  for (const char* part : {"{z}", "{x}", "{y}"})
    if (url.find(part) == std::string::npos) return fail(std::string("has no ") + part);
  const std::size_t host_end = url.find('/', scheme_end);
  if (host_end == scheme_end || host_end == std::string::npos) return fail("has no host and path");
  const std::string origin = url.substr(0, host_end);
  if (origin.find_first_of("{}?#@") != std::string::npos)
    return fail("must name its host literally");
  return origin;
}

struct ConsoleServer::State {
  using Handler = std::function<void(const HttpRequest&, HttpResponse&)>;
  QueryDesk& desk;
  ConsoleSettings settings;
  ConsoleSessions sessions;
  std::optional<ConsoleAssets> assets;
  std::unique_ptr<HttpServer> server;  // last: stopped before the rest goes
  bool tls = false;
  std::atomic<bool> query_running{false};  // one console query at a time (they queue in the desk)

  // One console query or watch at a time (both wait for the desk's query lock, and a worker
  // waiting there serves nobody else): the slot, released when it goes, or none and a 503 with
  // Retry-After already written.
  struct SlotRelease {
    void operator()(std::atomic<bool>* flag) const noexcept { *flag = false; }
  };
  using CallSlot = std::unique_ptr<std::atomic<bool>, SlotRelease>;
  CallSlot take_call_slot(HttpResponse& res) {
    if (!query_running.exchange(true)) return CallSlot(&query_running);
    res.set_header("Retry-After", "1");
    send_error(res, Error{ErrorCode::unavailable, "console",
                          "console: another console query or watch is running; retry when it "
                          "ends"});
    return nullptr;
  }

  State(QueryDesk& d, ConsoleSettings s) : desk(d), settings(std::move(s)) {}

  void log(const std::string& line) const {
    if (settings.log) settings.log(line);
  }

  // A wrong credential or CSRF token, logged for the operator: at most one line a second, the
  // lines held back counted in the next (a guessing client cannot flood the log).
  std::mutex refusal_log_mutex;
  ConsoleSessions::Clock::time_point refusal_logged_at{};
  std::uint64_t refusals_held_back = 0;
  void log_refused(const HttpRequest& req, const Error& why) {
    std::uint64_t held_back = 0;
    {
      std::lock_guard lock(refusal_log_mutex);
      const auto now = ConsoleSessions::Clock::now();
      if (now - refusal_logged_at < std::chrono::seconds(1)) {
        ++refusals_held_back;
        return;
      }
      refusal_logged_at = now;
      held_back = std::exchange(refusals_held_back, 0);
    }
    log("event=console-refused peer=" + protocol::log_value(req.peer) +
        " method=" + protocol::log_value(req.method) + " path=" + protocol::log_value(req.path) +
        " parameter=" + protocol::log_value(why.parameter) +
        " held_back=" + std::to_string(held_back));
  }

  // Who may call: the credential as a bearer token (scripts; no CSRF needed, as a browser never
  // adds it on its own), or a live session cookie, with its CSRF token on every POST and DELETE.
  std::optional<Error> refusal(const HttpRequest& req) {
    if (!settings.credential_sha256) return std::nullopt;
    const std::string authorization = req.header("Authorization");
    constexpr std::string_view kBearer = "bearer ";  // the scheme is case-insensitive
    std::string scheme = authorization.substr(0, kBearer.size());
    for (auto& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (scheme == kBearer) {
      if (credential_matches(std::string_view(authorization).substr(kBearer.size()),
                             *settings.credential_sha256))
        return std::nullopt;
      return Error{ErrorCode::unauthenticated, "credential",
                   "credential: the analyst credential is missing or refused"};
    }
    const auto csrf =
        sessions.find(cookie_value(req, kSessionCookie), ConsoleSessions::Clock::now());
    if (!csrf)
      return Error{ErrorCode::unauthenticated, "credential",
                   "credential: the analyst credential is missing or refused (sign in, or send "
                   "it as a bearer token)"};
    if ((req.method == "POST" || req.method == "DELETE") &&
        !ConsoleSessions::csrf_matches(req.header(kCsrfHeader), *csrf))
      return Error{ErrorCode::unauthenticated, "csrf_token",
                   "csrf_token: a request with the session cookie must carry the session's "
                   "CSRF token in the X-CSRF-Token header"};
    return std::nullopt;
  }

  // Every API handler runs inside this: the credential, a JSON body where there is one, the
  // desk ready, and no exception out (an unexpected one is a named internal_error).
  template <class Body>
  Handler api(bool takes_body, Body body) {
    return [this, takes_body, body](const HttpRequest& req, HttpResponse& res) {
      res.set_header("Cache-Control", "no-store");
      try {
        if (auto refused = refusal(req)) {
          const bool csrf = refused->parameter == "csrf_token";
          // A credential or token that was sent and is wrong (not one missing: a signed-out
          // page asks before it signs in).
          if (csrf || !req.header("Authorization").empty()) log_refused(req, *refused);
          send_error(res, *refused, csrf ? "PERMISSION_DENIED" : "UNAUTHENTICATED",
                     csrf ? 403 : 401);
          return;
        }
        if (takes_body && !is_json(req)) {
          send_error(res,
                     Error{ErrorCode::invalid_argument, "content_type",
                           "content_type: the body must be application/json, got '" +
                               req.header("Content-Type") + "'"},
                     "INVALID_ARGUMENT", 415);
          return;
        }
        if (!desk.ready) {
          send_error(res, Error{ErrorCode::unavailable, "coordinator",
                                "coordinator: starting; retry in a moment"});
          return;
        }
        body(req, res);
      } catch (const std::exception& e) {
        send_error(res, Error{ErrorCode::internal_error, "console",
                              std::string("console: unexpected failure: ") + e.what()});
      }
    };
  }

  // A query: its message from the body, one console query at a time, the desk's own method
  // (which checks every field as the gRPC API does), and the stored result read back whole.
  template <class Request>
  Handler query(cgp::Status (QueryDesk::*method)(const Request*, v1::QueryResult*)) {
    return api(true, [this, method](const HttpRequest& req, HttpResponse& res) {
      Request request;
      if (auto parsed = message_from_json(req.body, request); !parsed)
        return send_error(res, parsed.error());
      const CallSlot slot = take_call_slot(res);
      if (!slot) return;
      v1::QueryResult out;
      const cgp::Status ran = (desk.*method)(&request, &out);
      std::string shown;
      if (!out.query_id().empty())
        desk.read_result(out.query_id(),
                         [&](const v1::QueryResult& full) { shown = console_result_json(full); });
      if (ran) {
        res.set_content(shown.empty() ? console_result_json(out) : shown, kJson);
        return;
      }
      // An incomplete query's result exists (with its coverage): the error names it.
      const Kind kind = kind_of(ran.error().code);
      auto error = nlohmann::json::parse(error_json(ran.error(), kind.name));
      if (!shown.empty()) error["result"] = nlohmann::json::parse(shown);
      res.status = kind.http;
      res.set_content(json_text(error), kJson);
    });
  }

  // The API's routes: a method and a path, or a path prefix followed by an id (which holds no
  // '/').
  struct Route {
    const char* method;
    std::string path;
    bool takes_id;
    Handler handler;
  };
  std::vector<Route> api_routes;
  struct Routes {
    std::vector<Route>& list;
    void Get(std::string path, Handler h) { list.push_back({"GET", std::move(path), false, h}); }
    void Post(std::string path, Handler h) { list.push_back({"POST", std::move(path), false, h}); }
    void Delete(std::string path, Handler h) {
      list.push_back({"DELETE", std::move(path), false, h});
    }
    void GetById(std::string prefix, Handler h) {
      list.push_back({"GET", std::move(prefix), true, h});
    }
  };
  // The id a request to `prefix`{id} names.
  static std::string id_of(const HttpRequest& req, const std::string& prefix) {
    return req.path.substr(prefix.size());
  }

  void routes() {
    Routes s{api_routes};
    s.Post("/api/v1/session", [this](const HttpRequest& req, HttpResponse& res) {
      res.set_header("Cache-Control", "no-store");
      try {
        sign_in(req, res);
      } catch (const std::exception& e) {
        send_error(res, Error{ErrorCode::internal_error, "console",
                              std::string("console: unexpected failure: ") + e.what()});
      }
    });
    // Whether the browser's cookie names a live session: the page asks before it shows the
    // sign-in form (always 200, so that a signed-out page logs no failed request).
    s.Get("/api/v1/session", [this](const HttpRequest& req, HttpResponse& res) {
      res.set_header("Cache-Control", "no-store");
      const bool live =
          !settings.credential_sha256 ||
          sessions.find(cookie_value(req, kSessionCookie), ConsoleSessions::Clock::now());
      res.set_content(json_text({{"signed_in", live}}), kJson);
    });
    s.Delete("/api/v1/session", api(false, [this](const HttpRequest& req, HttpResponse& res) {
               sessions.close(cookie_value(req, kSessionCookie));
               res.set_header("Set-Cookie", std::string(kSessionCookie) +
                                                "=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict" +
                                                (tls ? "; Secure" : ""));
               res.set_content("{}", kJson);
             }));
    s.Get("/api/v1/status", api(false, [this](const HttpRequest&, HttpResponse& res) {
            v1::StatusRequest request;
            v1::CoordinatorStatus status;
            if (auto done = desk.status(&request, &status); !done)
              return send_error(res, done.error());
            res.set_content(message_to_json(status), kJson);
          }));
    // What the page needs to draw its map: the devices' frame (public: announced to every
    // device) and the tile server, if any.
    s.Get("/api/v1/console", api(false, [this](const HttpRequest&, HttpResponse& res) {
            nlohmann::json frame = nullptr;
            if (settings.frame)
              frame = nlohmann::json{
                  {"projection",
                   std::string(geometry::projection_kind_name(settings.frame->projection()))},
                  {"origin_lon", settings.frame->origin_lon()},
                  {"origin_lat", settings.frame->origin_lat()}};
            res.set_content(json_text({{"frame", std::move(frame)},
                                       {"tiles", settings.tiles_url.empty()
                                                     ? nlohmann::json(nullptr)
                                                     : nlohmann::json(settings.tiles_url)}}),
                            kJson);
          }));
    s.Get("/api/v1/fleet", api(false, [this](const HttpRequest&, HttpResponse& res) {
            res.set_content(fleet_json(), kJson);
          }));
    s.Get("/api/v1/queries", api(false, [this](const HttpRequest& req, HttpResponse& res) {
            std::size_t limit = 50;
            if (const auto given = req.param("limit")) {
              const std::string& text = *given;
              char* end = nullptr;
              const unsigned long long asked = std::strtoull(text.c_str(), &end, 10);
              const bool digits = !text.empty() && text.size() <= 6 &&
                                  std::all_of(text.begin(), text.end(),
                                              [](char c) { return c >= '0' && c <= '9'; });
              if (!digits || *end != '\0' || asked == 0 || asked > kMaxListedResults)
                return send_error(res,
                                  Error{ErrorCode::out_of_range, "limit",
                                        "limit: must be 1.." + std::to_string(kMaxListedResults) +
                                            ", got '" + text + "'"});
              limit = static_cast<std::size_t>(asked);
            }
            nlohmann::json list = nlohmann::json::array();
            for (const auto& id : desk.recent_result_ids(limit))
              desk.read_result(id, [&](const v1::QueryResult& r) {
                list.push_back({{"query_id", r.query_id()},
                                {"kind", r.kind()},
                                {"estimate", r.estimate()},
                                {"rounds_used", r.rounds_used()},
                                {"seconds", r.seconds()},
                                {"valid", r.coverage().valid() && r.missing().valid()},
                                {"users_charged", r.charges_size()}});
              });
            res.set_content(json_text({{"queries", std::move(list)}}), kJson);
          }));
    s.GetById(
        "/api/v1/queries/", api(false, [this](const HttpRequest& req, HttpResponse& res) {
          std::string shown;
          if (!desk.read_result(id_of(req, "/api/v1/queries/"), [&](const v1::QueryResult& full) {
                shown = console_result_json(full);
              }))
            return send_error(res,
                              Error{ErrorCode::invalid_argument, "query_id",
                                    "query_id: no finished query has this id (or it is past the "
                                    "retention bound)"},
                              "NOT_FOUND", 404);
          res.set_content(shown, kJson);
        }));
    s.Post("/api/v1/queries/range", query(&QueryDesk::range_count));
    s.Post("/api/v1/queries/kde", query(&QueryDesk::kde));
    s.Post("/api/v1/queries/knn", query(&QueryDesk::knn));
    s.Post("/api/v1/queries/top-regions", query(&QueryDesk::top_regions));
    s.Post("/api/v1/queries/threshold", query(&QueryDesk::threshold));
    s.Post("/api/v1/watches", api(true, [this](const HttpRequest& req, HttpResponse& res) {
             v1::StartWatchRequest request;
             if (auto parsed = message_from_json(req.body, request); !parsed)
               return send_error(res, parsed.error());
             const CallSlot slot = take_call_slot(res);
             if (!slot) return;
             v1::WatchReport report;
             if (auto done = desk.start_watch(&request, &report); !done)
               return send_error(res, done.error());
             res.set_content(message_to_json(report), kJson);
           }));
    s.GetById("/api/v1/watches/", api(false, [this](const HttpRequest& req, HttpResponse& res) {
                v1::WatchReportRequest request;
                request.set_watch_id(id_of(req, "/api/v1/watches/"));
                v1::WatchReport report;
                if (auto done = desk.get_watch(&request, &report); !done)
                  return send_error(res, done.error(), "NOT_FOUND", 404);
                res.set_content(message_to_json(report), kJson);
              }));
  }

  // Every request: an API route, the page's files, or a named error (405 for a path the API has
  // with another method, 404 for the rest).
  void handle(const HttpRequest& req, HttpResponse& res) {
    bool path_known = false;
    for (const auto& route : api_routes) {
      const bool matches = route.takes_id
                               ? req.path.size() > route.path.size() &&
                                     req.path.starts_with(route.path) &&
                                     req.path.find('/', route.path.size()) == std::string::npos
                               : req.path == route.path;
      if (!matches) continue;
      path_known = true;
      if (req.method == route.method) return route.handler(req, res);
    }
    if (path_known) {
      res.set_header("Allow", "GET, POST, DELETE");
      return send_error(res,
                        Error{ErrorCode::invalid_argument, "method",
                              "method: " + req.method + " is not a method of " + req.path},
                        "INVALID_ARGUMENT", 405);
    }
    if (req.method == "GET" && !req.path.starts_with("/api/")) {
      if (assets && assets->serve(req.path, res)) return;
      if (!assets && req.path == "/")
        return res.set_content(
            "cgpkit console: the page's files are not installed here (--console-assets); the "
            "API is at /api/v1 (docs/console.md)\n",
            "text/plain; charset=utf-8");
    }
    send_error(res,
               Error{ErrorCode::invalid_argument, "path",
                     "path: no " + req.method + " " + req.path + " here"},
               "NOT_FOUND", 404);
  }

  void sign_in(const HttpRequest& req, HttpResponse& res) {
    if (!is_json(req))
      return send_error(res,
                        Error{ErrorCode::invalid_argument, "content_type",
                              "content_type: the body must be application/json"},
                        "INVALID_ARGUMENT", 415);
    const auto body = nlohmann::json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object() || !body.contains("credential") ||
        !body["credential"].is_string())
      return send_error(res, Error{ErrorCode::malformed_message, "body",
                                   "body: expected {\"credential\": \"...\"}"});
    const std::string credential = body["credential"].get<std::string>();
    if (settings.credential_sha256 &&
        !credential_matches(credential, *settings.credential_sha256)) {
      const Error refused{ErrorCode::unauthenticated, "credential",
                          "credential: the analyst credential is refused"};
      log_refused(req, refused);
      return send_error(res, refused);
    }
    const auto opened = sessions.open(ConsoleSessions::Clock::now());
    res.set_header("Set-Cookie", std::string(kSessionCookie) + "=" + opened.token +
                                     "; Path=/; HttpOnly; SameSite=Strict" +
                                     (tls ? "; Secure" : ""));
    res.set_content(json_text({{"csrf_token", opened.csrf}}), kJson);
  }

  std::string fleet_json() {
    v1::StatusRequest request;
    v1::CoordinatorStatus status;
    (void)desk.status(&request, &status);
    auto round_json = [](const RoundSummary& r) {
      return nlohmann::json{{"query_id", r.query_id},
                            {"round", r.round},
                            {"asked", r.asked},
                            {"sent", r.sent},
                            {"answered", r.answered},
                            {"refused", r.refused},
                            {"rejected", r.rejected},
                            {"unanswered", r.unanswered},
                            {"not_reached", r.not_reached},
                            {"ended_by_deadline", r.ended_by_deadline},
                            {"milliseconds", r.milliseconds},
                            {"ended_unix_ms", r.ended_unix_ms}};
    };
    nlohmann::json rounds = nlohmann::json::array();
    for (const auto& r : desk.gateway->recent_rounds()) rounds.push_back(round_json(r));
    const auto waiting = desk.gateway->round_in_progress();
    return json_text(
        {{"enrolled", status.enrolled()},
         {"connected", status.connected()},
         {"queries", status.queries()},
         {"rounds_total", status.rounds()},
         {"requests", status.requests()},
         {"replies", status.replies()},
         {"unanswered", status.unanswered()},
         {"query_running", query_running.load() || waiting.has_value()},
         {"round_in_progress", waiting ? round_json(*waiting) : nlohmann::json(nullptr)},
         {"rounds", std::move(rounds)}});
  }
};

ConsoleServer::ConsoleServer(std::unique_ptr<State> state) : state_(std::move(state)) {}

ConsoleServer::~ConsoleServer() {
  state_->server.reset();  // stops serving and waits for the handlers that run
}

int ConsoleServer::port() const noexcept {
  return state_->server->port();
}

Expected<std::unique_ptr<ConsoleServer>> ConsoleServer::start(QueryDesk& desk,
                                                              ConsoleSettings settings) {
  auto address = parse_listen_address(settings.address);
  if (!address)
    return make_error(ErrorCode::invalid_argument, "console",
                      "console: " + address.error().message);
  if (settings.threads == 0 || settings.max_body_bytes == 0)
    return make_error(ErrorCode::not_positive, "console",
                      "console: threads and max_body_bytes must be > 0");
  std::string image_sources = "'self' data:";
  if (!settings.tiles_url.empty()) {
    CGP_ASSIGN_OR_RETURN(const std::string origin, tile_origin(settings.tiles_url));
    if (!settings.frame ||
        settings.frame->projection() != geometry::ProjectionKind::local_equidistant)
      return make_error(ErrorCode::invalid_argument, "console_tiles",
                        "console_tiles: needs a local frame (--frame local:LON,LAT): the page "
                        "places the tiles around its origin");
    image_sources += " " + origin;
  }
  auto state = std::make_unique<State>(desk, std::move(settings));
  auto& s = state->settings;
  if (!s.assets_dir.empty()) {
    CGP_ASSIGN_OR_RETURN(auto assets, ConsoleAssets::open(s.assets_dir));
    state->assets.emplace(std::move(assets));
  }
  state->tls = !s.tls_certificate_chain.empty();
  HttpServerSettings http;
  http.host = address->host;
  http.port = address->port;
  http.tls_certificate_chain = s.tls_certificate_chain;
  http.tls_private_key = s.tls_private_key;
  http.max_body_bytes = s.max_body_bytes;
  http.workers = s.threads;
  http.max_queued = 4 * s.threads;
  http.default_headers = {
      {"X-Content-Type-Options", "nosniff"},
      {"Referrer-Policy", "no-referrer"},
      {"X-Frame-Options", "DENY"},
      {"Content-Security-Policy",
       "default-src 'self'; img-src " + image_sources +
           "; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; "
           "base-uri 'none'; form-action 'self'"}};
  if (state->tls)
    http.default_headers.emplace_back("Strict-Transport-Security", "max-age=31536000");
  state->routes();
  auto server = HttpServer::start(
      std::move(http),
      [state = state.get()](const HttpRequest& req, HttpResponse& res) { state->handle(req, res); },
      [](HttpResponse& res, const Error& error, const char* status, int code) {
        send_error(res, error, status, code);
      });
  if (!server) return server.error();
  state->server = std::move(*server);
  state->log("event=console-listening address=" + protocol::log_value(s.address) +
             " port=" + std::to_string(state->server->port()) + (state->tls ? " tls=1" : " tls=0"));
  return std::unique_ptr<ConsoleServer>(new ConsoleServer(std::move(state)));
}

}  // namespace cgp::transport::detail
