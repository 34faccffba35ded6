// The console's HTTP API (docs/console.md) against a live coordinator with a swarm of devices:
// the same queries and results as the Analyst gRPC API, the credential as a bearer token or a
// session cookie with its CSRF token, and every bad request a named JSON error that charges
// nobody.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "cgp/analyst/analyst_client.hpp"
#include "cgp/common/geometry/location_frame.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/simulation/device_fleet.hpp"
#include "cgp/swarm/device_swarm.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "console_server.hpp"
#include "network_fixtures.hpp"
#include "simulation/fleet_fixtures.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr const char* kSecret = "console-secret";

struct LiveConsole {
  std::unique_ptr<transport::CoordinatorService> service;
  std::unique_ptr<swarm::DeviceSwarm> swarm;
  std::string address;

  LiveConsole(const std::vector<double>& points, std::size_t n, double budget, std::uint64_t seed,
              const std::string& assets = "", const test::ThrowawayCertificate* tls = nullptr,
              const std::function<void(transport::CoordinatorOptions&)>& configure = {}) {
    transport::CoordinatorOptions options;
    options.device_ids = test::device_ids(n);
    options.device_budget = budget;
    options.analyst_credential_sha256 = transport::sha256_of(kSecret);
    options.console_address = "127.0.0.1:0";
    options.console_assets_dir = assets;
    if (tls) {
      options.gateway.tls_certificate_chain = tls->certificate;
      options.gateway.tls_private_key = tls->key;
    }
    if (configure) configure(options);
    auto started = transport::CoordinatorService::start(options);
    REQUIRE(started.has_value());
    service = std::move(*started);
    address = "127.0.0.1:" + std::to_string(service->port());
    swarm::SwarmOptions swarm_options;
    swarm_options.coordinator_address = address;
    swarm_options.config = *DeviceConfig::cgp(budget);
    swarm_options.seed = seed;
    if (tls) swarm_options.tls_root_certificate = tls->certificate;
    swarm = *swarm::DeviceSwarm::start(swarm_options, test::swarm_members(points, n));
    REQUIRE(service->gateway().wait_for_devices(n, 30s));
  }
  ~LiveConsole() {
    swarm.reset();
    service.reset();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", service->console_port());
    c.set_read_timeout(60, 0);
    return c;
  }
};

httplib::Headers bearer(const std::string& credential = kSecret) {
  return {{"Authorization", "Bearer " + credential}};
}

json body_of(const httplib::Result& r) {
  REQUIRE(r);
  INFO("HTTP " << r->status << ": " << r->body);
  auto parsed = json::parse(r->body, nullptr, false);
  REQUIRE_FALSE(parsed.is_discarded());
  return parsed;
}

// The response is the named error `code` naming `parameter`, with HTTP status `http`.
void check_error(const httplib::Result& r, int http, const std::string& code,
                 const std::string& parameter) {
  REQUIRE(r);
  INFO("HTTP " << r->status << ": " << r->body);
  CHECK(r->status == http);
  CHECK(r->get_header_value("Content-Type") == "application/json");
  const json body = body_of(r);
  REQUIRE(body.contains("error"));
  CHECK(body["error"]["code"] == code);
  CHECK(body["error"]["parameter"] == parameter);
  CHECK(body["error"]["message"].get<std::string>().find(parameter) != std::string::npos);
}

std::uint64_t requests_sent(const httplib::Client& c_in) {
  auto& c = const_cast<httplib::Client&>(c_in);
  const json status = body_of(c.Get("/api/v1/status", bearer()));
  return std::stoull(status["requests"].get<std::string>());
}

// A connection to the console on loopback (-1 if it cannot connect).
int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  timeval timeout{20, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  return fd;
}

// Sends `request` as raw bytes and reads the answer until the console closes the connection.
std::string raw_exchange(int port, const std::string& request) {
  const int fd = connect_to(port);
  REQUIRE(fd >= 0);
  REQUIRE(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size()));
  std::string answer;
  char buffer[4096];
  for (ssize_t got; (got = ::recv(fd, buffer, sizeof buffer, 0)) > 0;)
    answer.append(buffer, static_cast<std::size_t>(got));
  ::close(fd);
  return answer;
}

json range_body(const std::string& id, double rho, const json& region) {
  return {{"options", {{"query_id", id}, {"method", "PM1"}, {"rounds", 4}, {"rho", rho}}},
          {"range", region}};
}

}  // namespace

TEST_CASE("console: a range query over HTTP is the Analyst API's query", "[transport][console]") {
  CGP_SEEDED(32001);
  const std::size_t n = 200;
  const double budget = 1.0;
  auto points = test::uniform_square(n, 2000, seed);
  LiveConsole live(points, n, budget, seed);
  auto http = live.client();

  const json region = {{"box", {{"lo", {400, 400}}, {"hi", {1400, 1400}}}}};
  auto ran = http.Post("/api/v1/queries/range", bearer(),
                       range_body("console-1", 0.01, region).dump(), "application/json");
  const json result = body_of(ran);
  REQUIRE(ran->status == 200);
  CHECK(result["query_id"] == "console-1");
  CHECK(result["kind"] == "range");

  // The same query in process, on devices seeded alike: the same estimate, bit for bit.
  double lo[2] = {400, 400}, hi[2] = {1400, 1400};
  coordinator::QueryOptions options;
  options.method = coordinator::Method::PM1;
  options.rounds = 4;
  options.query_id = "console-1";
  auto local = *simulation::DeviceFleet::create(*DeviceConfig::cgp(budget), points, 2, seed, 1);
  coordinator::BudgetMirror local_mirror(n, local.initial_budget());
  auto expected = *coordinator::range_count(local, local_mirror, *geometry::Box::create(lo, hi),
                                            test::charge_everyone(0.01), options);
  CHECK(result["estimate"].get<double>() == expected.estimate);
  CHECK(result["rounds_used"].get<std::uint32_t>() == expected.report.rounds_used);

  // The Analyst API reads the same stored result.
  auto analyst = *analyst::AnalystClient::connect(
      {live.address, kSecret, "", 60s, std::nullopt, std::nullopt});
  auto stored = analyst.result("console-1");
  REQUIRE(stored.has_value());
  CHECK(stored->estimate == result["estimate"].get<double>());

  // Spending is a histogram, never a per-user list.
  for (const char* list :
       {"charges", "charged", "refused", "rejected", "unanswered", "not_reached"})
    CHECK_FALSE(result.contains(list));
  const json& spending = result["spending"];
  std::uint64_t binned = 0;
  for (const auto& bin : spending["bins"]) binned += bin["users"].get<std::uint64_t>();
  std::size_t charged_users = 0;
  double total = 0;
  for (const auto charge : expected.report.charged) {
    const double c = charge.value();
    charged_users += c > 0 ? 1 : 0;
    total += c;
  }
  CHECK(spending["users_charged"].get<std::size_t>() == charged_users);
  CHECK(binned == charged_users);
  CHECK(spending["total_rho"].get<double>() == Approx(total).epsilon(1e-12));
  CHECK(spending["max_rho"].get<double>() <= 0.01);

  // Read back, listed, and the fleet panel's rounds.
  CHECK(body_of(http.Get("/api/v1/queries/console-1", bearer())) == result);
  const json list = body_of(http.Get("/api/v1/queries?limit=5", bearer()));
  REQUIRE(list["queries"].size() == 1);
  CHECK(list["queries"][0]["query_id"] == "console-1");
  const json fleet = body_of(http.Get("/api/v1/fleet", bearer()));
  CHECK(fleet["connected"].get<std::uint64_t>() == n);
  REQUIRE(fleet["rounds"].size() == expected.report.rounds_used);
  for (std::size_t r = 0; r < fleet["rounds"].size(); ++r) {
    const json& round = fleet["rounds"][r];
    CHECK(round["query_id"] == "console-1");
    CHECK(round["asked"].get<std::uint64_t>() == expected.report.asked_per_round[r]);
    CHECK(round["answered"].get<std::uint64_t>() + round["unanswered"].get<std::uint64_t>() ==
          round["asked"].get<std::uint64_t>());
  }

  // The id cannot be used again: ALREADY_EXISTS as on gRPC, and nobody asked.
  const auto before = requests_sent(http);
  check_error(http.Post("/api/v1/queries/range", bearer(),
                        range_body("console-1", 0.01, region).dump(), "application/json"),
              409, "already_exists", "query_id");
  CHECK(requests_sent(http) == before);
}

TEST_CASE("console: the credential, sessions and CSRF", "[transport][console]") {
  CGP_SEEDED(32002);
  const std::size_t n = 20;
  auto points = test::uniform_square(n, 2000, seed);
  std::mutex log_mutex;
  std::vector<std::string> refused_lines;
  LiveConsole live(points, n, 1.0, seed, "", nullptr, [&](transport::CoordinatorOptions& o) {
    o.gateway.log = [&](const std::string& line) {
      std::lock_guard lock(log_mutex);
      if (line.find("event=console-refused") != std::string::npos) refused_lines.push_back(line);
    };
  });
  auto http = live.client();
  const std::string query =
      range_body("", 0.01, {{"box", {{"lo", {0, 0}}, {"hi", {1000, 1000}}}}}).dump();

  check_error(http.Get("/api/v1/status"), 401, "unauthenticated", "credential");
  check_error(http.Get("/api/v1/status", bearer("wrong")), 401, "unauthenticated", "credential");
  check_error(http.Post("/api/v1/queries/range", query, "application/json"), 401, "unauthenticated",
              "credential");
  check_error(http.Post("/api/v1/session", R"({"credential": "wrong"})", "application/json"), 401,
              "unauthenticated", "credential");
  check_error(http.Post("/api/v1/session", R"({"secret": 1})", "application/json"), 400,
              "malformed_message", "body");
  // A wrong credential is logged for the operator (one line a second at most; the rest counted),
  // a missing one is not.
  {
    std::lock_guard lock(log_mutex);
    REQUIRE_FALSE(refused_lines.empty());
    CHECK(refused_lines.front().find("peer=127.0.0.1") != std::string::npos);
    CHECK(refused_lines.front().find("parameter=credential") != std::string::npos);
    CHECK(refused_lines.front().find("path=/api/v1/status") != std::string::npos);
  }

  auto signed_in =
      http.Post("/api/v1/session", json{{"credential", kSecret}}.dump(), "application/json");
  REQUIRE(signed_in);
  REQUIRE(signed_in->status == 200);
  const std::string cookie_line = signed_in->get_header_value("Set-Cookie");
  CHECK(cookie_line.find("HttpOnly") != std::string::npos);
  CHECK(cookie_line.find("SameSite=Strict") != std::string::npos);
  const std::string cookie = cookie_line.substr(0, cookie_line.find(';'));
  const std::string csrf = body_of(signed_in)["csrf_token"];
  CHECK(csrf.size() == 64);

  const httplib::Headers with_cookie{{"Cookie", cookie}};
  // The session's token with its first digit changed (the token is random: a fixed digit would
  // be the right one for 1 session in 16).
  const std::string wrong_csrf = (csrf[0] == '0' ? "1" : "0") + csrf.substr(1);
  CHECK(http.Get("/api/v1/status", with_cookie)->status == 200);
  // A POST with the cookie alone (what another site's form could make a browser send) is
  // refused before anything runs; with the session's token it runs.
  const auto before = requests_sent(http);
  check_error(http.Post("/api/v1/queries/range", with_cookie, query, "application/json"), 403,
              "unauthenticated", "csrf_token");
  check_error(http.Post("/api/v1/queries/range", {{"Cookie", cookie}, {"X-CSRF-Token", wrong_csrf}},
                        query, "application/json"),
              403, "unauthenticated", "csrf_token");
  CHECK(requests_sent(http) == before);
  auto ran = http.Post("/api/v1/queries/range", {{"Cookie", cookie}, {"X-CSRF-Token", csrf}}, query,
                       "application/json");
  REQUIRE(ran);
  CHECK(ran->status == 200);
  CHECK(requests_sent(http) > before);

  // Signing out ends the session: the cookie is refused from then on.
  CHECK(http.Delete("/api/v1/session", {{"Cookie", cookie}, {"X-CSRF-Token", csrf}})->status ==
        200);
  check_error(http.Get("/api/v1/status", with_cookie), 401, "unauthenticated", "credential");
}

TEST_CASE("console: bad requests are named errors and charge nobody", "[transport][console]") {
  CGP_SEEDED(32003);
  const std::size_t n = 20;
  auto points = test::uniform_square(n, 2000, seed);
  LiveConsole live(points, n, 1.0, seed);
  auto http = live.client();
  const auto before = requests_sent(http);
  const json box = {{"box", {{"lo", {0, 0}}, {"hi", {1000, 1000}}}}};

  check_error(http.Post("/api/v1/queries/range", bearer(), "{not json", "application/json"), 400,
              "malformed_message", "body");
  check_error(http.Post("/api/v1/queries/range", bearer(), R"({"options": {}, "rnage": {}})",
                        "application/json"),
              400, "malformed_message", "body");
  check_error(
      http.Post("/api/v1/queries/range", bearer(), range_body("", 0.01, box).dump(), "text/plain"),
      415, "invalid_argument", "content_type");
  check_error(
      http.Post("/api/v1/queries/range", bearer(), std::string(2 << 20, ' '), "application/json"),
      413, "too_large", "body");
  // NaN, infinite, zero and negative ρ, each named as on gRPC.
  for (const json& rho : {json("NaN"), json("Infinity"), json(0.0), json(-1.0)}) {
    json q = range_body("", 0.01, box);
    q["options"]["rho"] = rho;
    auto r = http.Post("/api/v1/queries/range", bearer(), q.dump(), "application/json");
    REQUIRE(r);
    INFO(r->body);
    CHECK(r->status == 400);
    CHECK(body_of(r)["error"]["parameter"] == "rho");
  }
  // Hostile polygons: a bow tie, a ring of two vertices, a non-finite vertex.
  const json bow_tie = {{"polygon", {{"outer", {{"xy", {0, 0, 1000, 1000, 1000, 0, 0, 1000}}}}}}};
  check_error(http.Post("/api/v1/queries/range", bearer(),
                        range_body("fixable", 0.01, bow_tie).dump(), "application/json"),
              400, "self_intersecting_polygon", "polygon.outer");
  const json two = {{"polygon", {{"outer", {{"xy", {0, 0, 1000, 1000}}}}}}};
  auto r2 = http.Post("/api/v1/queries/range", bearer(), range_body("", 0.01, two).dump(),
                      "application/json");
  REQUIRE(r2);
  CHECK(r2->status == 400);
  const json nan_vertex = {{"polygon", {{"outer", {{"xy", {0, 0, 1000, "NaN", 1000, 0}}}}}}};
  auto r3 = http.Post("/api/v1/queries/range", bearer(), range_body("", 0.01, nan_vertex).dump(),
                      "application/json");
  REQUIRE(r3);
  CHECK(r3->status == 400);
  CHECK(body_of(r3)["error"]["code"] == "not_finite");
  // kNN with k = 0, KDE without a bandwidth.
  auto knn = http.Post("/api/v1/queries/knn", bearer(),
                       json{{"options", {{"rho", 0.01}}}, {"point", {0, 0}}, {"k", 0}}.dump(),
                       "application/json");
  REQUIRE(knn);
  CHECK(knn->status == 400);
  CHECK(body_of(knn)["error"]["parameter"] == "k");
  auto kde =
      http.Post("/api/v1/queries/kde", bearer(),
                json{{"options", {{"rho", 0.01}}}, {"point", {0, 0}}}.dump(), "application/json");
  REQUIRE(kde);
  CHECK(kde->status == 400);
  CHECK(body_of(kde)["error"]["parameter"] == "bandwidth");
  // Unknown ids, paths and limits.
  check_error(http.Get("/api/v1/queries/no-such-query", bearer()), 404, "invalid_argument",
              "query_id");
  check_error(http.Get("/api/v1/nothing", bearer()), 404, "invalid_argument", "path");
  check_error(http.Get("/api/v1/queries?limit=0", bearer()), 400, "out_of_range", "limit");
  check_error(http.Get("/api/v1/queries?limit=1e9", bearer()), 400, "out_of_range", "limit");
  CHECK(requests_sent(http) == before);
  CHECK(body_of(http.Get("/api/v1/status", bearer()))["queries"] == "0");
  // A refused query asked no device: its id is free for the query fixed.
  auto fixed = http.Post("/api/v1/queries/range", bearer(), range_body("fixable", 0.01, box).dump(),
                         "application/json");
  REQUIRE(fixed);
  INFO(fixed->body);
  CHECK(fixed->status == 200);
  CHECK(body_of(fixed)["query_id"] == "fixable");
  check_error(http.Post("/api/v1/queries/range", bearer(), range_body("fixable", 0.01, box).dump(),
                        "application/json"),
              409, "already_exists", "query_id");
}

TEST_CASE("console: the page's files, with their security headers", "[transport][console]") {
  CGP_SEEDED(32004);
  const auto assets =
      std::filesystem::temp_directory_path() / ("cgp-console-" + std::to_string(::getpid()));
  std::filesystem::create_directories(assets);
  std::ofstream(assets / "index.html") << "<!doctype html><title>cgpkit console</title>";
  std::filesystem::create_directories(assets / "sub");
  std::ofstream(assets / "sub" / "page.js") << "console.log(1);";
  // A link that leads out of the folder is not followed.
  std::filesystem::create_symlink("/etc/passwd", assets / "leak");
  std::ofstream(assets / ".hidden") << "root: a file left in the folder";
  const std::size_t n = 5;
  auto points = test::uniform_square(n, 2000, seed);
  {
    LiveConsole live(points, n, 1.0, seed, assets.string());
    auto http = live.client();
    auto page = http.Get("/");
    REQUIRE(page);
    CHECK(page->status == 200);
    CHECK(page->body.find("cgpkit console") != std::string::npos);
    CHECK(page->get_header_value("Content-Security-Policy").find("default-src 'self'") !=
          std::string::npos);
    CHECK(page->get_header_value("X-Content-Type-Options") == "nosniff");
    // No file outside the folder.
    for (const char* path : {"/../../../../etc/passwd", "/%2e%2e/%2e%2e/%2e%2e/etc/passwd", "/leak",
                             "/sub/..%2f..%2f..%2fetc/passwd", "/sub", "/.hidden"}) {
      INFO(path);
      const std::string answer = raw_exchange(
          live.service->console_port(),
          std::string("GET ") + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
      CHECK(answer.rfind("HTTP/1.1 404", 0) == 0);
      CHECK(answer.find("root:") == std::string::npos);
    }
    // The page's own files come with their types.
    auto script = http.Get("/sub/page.js");
    REQUIRE(script);
    CHECK(script->status == 200);
    CHECK(script->get_header_value("Content-Type") == "text/javascript; charset=utf-8");
  }
  std::filesystem::remove_all(assets);
}

TEST_CASE("console: HTTPS with the coordinator's TLS material", "[transport][console]") {
  CGP_SEEDED(32005);
  test::ThrowawayCertificate tls;
  const std::size_t n = 5;
  auto points = test::uniform_square(n, 2000, seed);
  LiveConsole live(points, n, 1.0, seed, "", &tls);
  const auto ca = std::filesystem::temp_directory_path() /
                  ("cgp-console-ca-" + std::to_string(::getpid()) + ".pem");
  std::ofstream(ca) << tls.certificate;
  httplib::SSLClient https("127.0.0.1", live.service->console_port());
  https.set_ca_cert_path(ca.c_str());
  https.enable_server_certificate_verification(true);
  auto status = https.Get("/api/v1/status", bearer());
  REQUIRE(status);
  CHECK(status->status == 200);
  CHECK(body_of(status)["connected"] == std::to_string(n));
  auto signed_in =
      https.Post("/api/v1/session", json{{"credential", kSecret}}.dump(), "application/json");
  REQUIRE(signed_in);
  CHECK(signed_in->get_header_value("Set-Cookie").find("; Secure") != std::string::npos);
  // Plain HTTP on the HTTPS port gets nothing.
  httplib::Client plain("127.0.0.1", live.service->console_port());
  plain.set_read_timeout(5, 0);
  auto refused = plain.Get("/api/v1/status", bearer());
  CHECK((!refused || refused->status != 200));
  std::filesystem::remove(ca);
}

TEST_CASE("console: a tile server for the map, with the devices' frame", "[transport][console]") {
  CGP_SEEDED(32006);
  const std::size_t n = 5;
  auto points = test::uniform_square(n, 2000, seed);
  const std::string tiles = "https://tiles.example.org:8443/osm/{z}/{x}/{y}.png";
  LiveConsole live(points, n, 1.0, seed, "", nullptr, [&](transport::CoordinatorOptions& o) {
    o.gateway.frame = *geometry::LocationFrame::parse("local:-73.97,40.75");
    o.console_tiles_url = tiles;
  });
  auto http = live.client();
  const json config = body_of(http.Get("/api/v1/console", bearer()));
  CHECK(config["tiles"] == tiles);
  CHECK(config["frame"]["projection"] == "local");
  CHECK(config["frame"]["origin_lon"].get<double>() == -73.97);
  CHECK(config["frame"]["origin_lat"].get<double>() == 40.75);
  // The tile server's origin is the one image source allowed besides the console itself.
  const std::string policy =
      http.Get("/api/v1/console", bearer())->get_header_value("Content-Security-Policy");
  CHECK(policy.find("img-src 'self' data: https://tiles.example.org:8443;") != std::string::npos);
  check_error(http.Get("/api/v1/console"), 401, "unauthenticated", "credential");

  // Without tiles: no frame needed, and no other image source.
  LiveConsole offline(points, n, 1.0, seed);
  auto plain = offline.client();
  CHECK(body_of(plain.Get("/api/v1/console", bearer()))["tiles"].is_null());
  CHECK(plain.Get("/api/v1/console", bearer())
            ->get_header_value("Content-Security-Policy")
            .find("img-src 'self' data:;") != std::string::npos);
}

TEST_CASE("console: tile URLs that could break out of the page's policy are refused",
          "[transport][console]") {
  using transport::detail::tile_origin;
  CHECK(*tile_origin("https://a.tile.example.org/{z}/{x}/{y}.png") == "https://a.tile.example.org");
  CHECK(*tile_origin("http://127.0.0.1:8080/{z}/{x}/{y}.png?key=abc") == "http://127.0.0.1:8080");
  for (const char* bad :
       {"ftp://example.org/{z}/{x}/{y}.png", "https://example.org/{z}/{x}.png",
        "https://example.org/{z}/{x}/{y}.png; script-src *",
        "https://example.org/{z}/{x}/{y}.png 'unsafe-inline'",
        "https://exa\"mple.org/{z}/{x}/{y}.png", "https://{s}.example.org/{z}/{x}/{y}.png",
        "https:///{z}/{x}/{y}.png", "https://example.org", ""}) {
    INFO(bad);
    auto origin = tile_origin(bad);
    REQUIRE_FALSE(origin.has_value());
    CHECK(origin.error().parameter == "console_tiles");
  }
  // A tile server needs a local frame to place its tiles: the coordinator refuses to start.
  transport::CoordinatorOptions options;
  options.device_ids = test::device_ids(2);
  options.console_address = "127.0.0.1:0";
  options.console_tiles_url = "https://tiles.example.org/{z}/{x}/{y}.png";
  auto started = transport::CoordinatorService::start(options);
  REQUIRE_FALSE(started.has_value());
  CHECK(started.error().parameter == "console_tiles");
}

TEST_CASE("console: hostile HTTP framing is refused by name and never stops the coordinator",
          "[transport][console]") {
  CGP_SEEDED(32007);
  const std::size_t n = 5;
  auto points = test::uniform_square(n, 2000, seed);
  LiveConsole live(points, n, 1.0, seed);
  auto http = live.client();
  const int port = live.service->console_port();
  const auto before = requests_sent(http);
  // Paths that are not UTF-8 (an <img> on any web page can ask for them): a named 404.
  for (const std::string path : {"/%FF", "/\xff", "/x%C3%28", "/api/v1/queries/%FF"}) {
    INFO(path);
    const std::string answer =
        raw_exchange(port, "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    CHECK(answer.rfind("HTTP/1.1 4", 0) == 0);
    CHECK(answer.find("\"error\"") != std::string::npos);
  }
  // Bodies whose size is not known before they are read, or that would be inflated.
  const std::string bearer_line = std::string("Authorization: Bearer ") + kSecret + "\r\n";
  const std::string chunked =
      raw_exchange(port, "POST /api/v1/queries/range HTTP/1.1\r\nHost: x\r\n" + bearer_line +
                             "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                             "Connection: close\r\n\r\n4\r\n{}  \r\n0\r\n\r\n");
  CHECK(chunked.rfind("HTTP/1.1 400", 0) == 0);
  CHECK(chunked.find("\"parameter\":\"transfer_encoding\"") != std::string::npos);
  auto gzip =
      http.Post("/api/v1/session", {{"Content-Encoding", "gzip"}}, "{}", "application/json");
  check_error(gzip, 400, "invalid_argument", "content_encoding");
  // Ranges are not served: the whole answer comes back.
  auto ranges = http.Get("/api/v1/status", {{"Authorization", std::string("Bearer ") + kSecret},
                                            {"Range", "bytes=0-1,2-3"}});
  REQUIRE(ranges);
  CHECK(ranges->status == 200);
  CHECK_FALSE(body_of(ranges).empty());
  // Methods the console does not take, and targets that are not paths.
  const std::string put = raw_exchange(port, "PUT /api/v1/status HTTP/1.1\r\nHost: x\r\n" +
                                                 bearer_line + "Content-Length: 0\r\n\r\n");
  CHECK(put.rfind("HTTP/1.1 405", 0) == 0);
  CHECK(put.find("\"parameter\":\"method\"") != std::string::npos);
  check_error(http.Delete("/api/v1/status", bearer()), 405, "invalid_argument", "method");
  const std::string absolute = raw_exchange(
      port, "GET http://x/api/v1/status HTTP/1.1\r\nHost: x\r\n" + bearer_line + "\r\n");
  CHECK(absolute.rfind("HTTP/1.1 400", 0) == 0);
  CHECK(absolute.find("\"parameter\":\"path\"") != std::string::npos);
  const std::string garbage = raw_exchange(port, "\x16\x03\x01 not http at all\r\n\r\n");
  CHECK((garbage.empty() || garbage.rfind("HTTP/1.1 400", 0) == 0));
  // The scheme is case-insensitive; a refusal says which scheme to use.
  CHECK(http.Get("/api/v1/status", {{"Authorization", std::string("bearer ") + kSecret}})->status ==
        200);
  auto refused = http.Get("/api/v1/status");
  REQUIRE(refused);
  CHECK(refused->get_header_value("WWW-Authenticate") == "Bearer");
  check_error(http.Get("/api/v1/queries?limit=+5", bearer()), 400, "out_of_range", "limit");
  // Still serving, and nobody asked.
  CHECK(http.Get("/api/v1/status", bearer())->status == 200);
  CHECK(requests_sent(http) == before);
}

TEST_CASE("console: a stop does not wait for a client that trickles its request",
          "[transport][console]") {
  CGP_SEEDED(32008);
  const std::size_t n = 3;
  auto points = test::uniform_square(n, 2000, seed);
  auto live = std::make_unique<LiveConsole>(points, n, 1.0, seed);
  // One header byte every 200 ms: never silent long enough for a read timeout.
  const int fd = connect_to(live->service->console_port());
  REQUIRE(fd >= 0);
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    const std::string start = "GET /api/v1/status HTTP/1.1\r\nX-Slow: ";
    ::send(fd, start.data(), start.size(), MSG_NOSIGNAL);
    while (!stop && ::send(fd, "a", 1, MSG_NOSIGNAL) == 1)
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // If the stop waited for the client, this would not return (the client never stops by
  // itself): the test would hang until ctest's timeout.
  live.reset();
  stop = true;
  trickle.join();
  ::close(fd);
  SUCCEED("the coordinator stopped with the slow client still sending");
}

TEST_CASE("console: a request is bounded as a whole: its deadline, its head, its connections",
          "[transport][console]") {
  CGP_SEEDED(32009);
  const std::size_t n = 3;
  auto points = test::uniform_square(n, 2000, seed);
  LiveConsole live(points, n, 1.0, seed);
  auto http = live.client();
  const int port = live.service->console_port();
  const auto before = requests_sent(http);

  // A client that sends one header byte every 200 ms is never silent for long, yet the console
  // ends it at its request deadline (5 s): the socket is closed under it well before the client's
  // own 20 s receive timeout.
  {
    const int fd = connect_to(port);
    REQUIRE(fd >= 0);
    std::atomic<bool> stop{false};
    std::thread trickle([&] {
      const std::string start = "GET /api/v1/status HTTP/1.1\r\nX-Slow: ";
      ::send(fd, start.data(), start.size(), MSG_NOSIGNAL);
      while (!stop && ::send(fd, "a", 1, MSG_NOSIGNAL) == 1)
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    });
    char byte = 0;
    const ssize_t got = ::recv(fd, &byte, 1, 0);  // blocks until the console closes (or 20 s)
    const int error = errno;
    stop = true;
    trickle.join();
    ::close(fd);
    INFO("recv returned " << got << ", errno " << error);
    CHECK((got == 0 || (got < 0 && error == ECONNRESET)));
  }

  // A head larger than 16 KiB in all, in short lines: refused by name once the bound is passed,
  // without reading the rest.
  {
    std::string head = "GET /api/v1/status HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 4000; ++i) head += "X-Line-" + std::to_string(i) + ": 0123456789\r\n";
    head += "\r\n";
    const std::string answer = raw_exchange(port, head);
    CHECK(answer.rfind("HTTP/1.1 431", 0) == 0);
    CHECK(answer.find("\"parameter\":\"headers\"") != std::string::npos);
  }

  // A client half-way through its request from one address, while another address floods the
  // console with idle connections: the flood closes its own connections, not the request.
  {
    const int victim = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl(0x7f000002);  // 127.0.0.2
    REQUIRE(::bind(victim, reinterpret_cast<sockaddr*>(&from), sizeof from) == 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<std::uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(victim, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0);
    timeval timeout{20, 0};
    ::setsockopt(victim, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    const std::string first = "GET /api/v1/status HTTP/1.1\r\n";
    REQUIRE(::send(victim, first.data(), first.size(), MSG_NOSIGNAL) > 0);
    std::vector<int> flood;
    for (int i = 0; i < 200; ++i)
      if (const int fd = connect_to(port); fd >= 0) flood.push_back(fd);
    const std::string rest = "Host: x\r\n" + std::string("Authorization: Bearer ") + kSecret +
                             "\r\nConnection: close\r\n\r\n";
    REQUIRE(::send(victim, rest.data(), rest.size(), MSG_NOSIGNAL) > 0);
    std::string answer;
    char buffer[4096];
    for (ssize_t got; (got = ::recv(victim, buffer, sizeof buffer, 0)) > 0;)
      answer.append(buffer, static_cast<std::size_t>(got));
    ::close(victim);
    for (const int fd : flood) ::close(fd);
    CHECK(answer.rfind("HTTP/1.1 200", 0) == 0);
  }

  // A client that waits for "100 Continue" before its body gets it.
  {
    const int fd = connect_to(port);
    REQUIRE(fd >= 0);
    const std::string body = json{{"credential", kSecret}}.dump();
    const std::string head =
        "POST /api/v1/session HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Expect: 100-continue\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n";
    REQUIRE(::send(fd, head.data(), head.size(), MSG_NOSIGNAL) > 0);
    char buffer[4096];
    const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
    REQUIRE(got > 0);
    CHECK(std::string(buffer, static_cast<std::size_t>(got)).rfind("HTTP/1.1 100", 0) == 0);
    REQUIRE(::send(fd, body.data(), body.size(), MSG_NOSIGNAL) > 0);
    std::string answer;
    for (ssize_t more; (more = ::recv(fd, buffer, sizeof buffer, 0)) > 0;)
      answer.append(buffer, static_cast<std::size_t>(more));
    ::close(fd);
    CHECK(answer.rfind("HTTP/1.1 200", 0) == 0);
    CHECK(answer.find("csrf_token") != std::string::npos);
  }

  // 200 idle connections (over the cap of 64): the oldest make room, and a real request is served.
  {
    std::vector<int> idle;
    for (int i = 0; i < 200; ++i) {
      const int fd = connect_to(port);
      if (fd >= 0) idle.push_back(fd);
    }
    CHECK(idle.size() == 200);
    auto status = http.Get("/api/v1/status", bearer());
    REQUIRE(status);
    CHECK(status->status == 200);
    for (const int fd : idle) ::close(fd);
  }
  CHECK(requests_sent(http) == before);
}
