/* The device C ABI exercised from C, using only <cgp/cgp.h> and the library. Protobuf messages
 * are encoded and decoded by hand here (a C app would use protobuf-c or nanopb), which also
 * pins the wire format of cgp.v1. Prints "N passed, M failed"; exits non-zero on any failure. */
#include <cgp/cgp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int passed = 0, failed = 0;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (cond) {                                                                \
      ++passed;                                                                \
    } else {                                                                   \
      ++failed;                                                                \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                          \
  } while (0)

/* ---- a minimal protobuf writer ---- */
typedef struct {
  uint8_t bytes[512];
  size_t len;
} buffer;

static void put_byte(buffer* b, uint8_t v) {
  b->bytes[b->len++] = v;
}
static void put_varint(buffer* b, uint64_t v) {
  while (v >= 0x80) {
    put_byte(b, (uint8_t)(v | 0x80));
    v >>= 7;
  }
  put_byte(b, (uint8_t)v);
}
static void put_double(buffer* b, int field, double v) {
  uint8_t raw[8];
  memcpy(raw, &v, 8); /* little-endian host, as on every supported target */
  put_varint(b, (uint64_t)(field << 3 | 1));
  for (int i = 0; i < 8; ++i) put_byte(b, raw[i]);
}
static void put_bytes(buffer* b, int field, const void* data, size_t len) {
  put_varint(b, (uint64_t)(field << 3 | 2));
  put_varint(b, len);
  memcpy(b->bytes + b->len, data, len);
  b->len += len;
}

static buffer cgp_config(double budget) {
  buffer b = {{0}, 0};
  put_varint(&b, 1 << 3 | 0); /* filter = CGP */
  put_varint(&b, 1);
  put_double(&b, 2, budget);
  return b;
}

static buffer location_request(const char* query, unsigned round, double rho) {
  buffer id = {{0}, 0}, b = {{0}, 0};
  put_bytes(&id, 1, query, strlen(query));
  put_varint(&id, 2 << 3 | 0);
  put_varint(&id, round);
  put_bytes(&b, 1, id.bytes, id.len);
  put_bytes(&b, 2, "location", 8);
  put_bytes(&b, 3, "", 0); /* statistic: location {} */
  put_double(&b, 6, rho);
  return b;
}

/* cgp.v1.WatchSpec: distance to (px, py), threshold 300 m, clamp [0, 1000], laplace. */
static buffer geofence_spec(const char* id, double px, double py, double epsilon,
                            uint64_t horizon) {
  buffer score = {{0}, 0}, b = {{0}, 0};
  double xy[2] = {px, py};
  put_bytes(&score, 1, xy, sizeof xy); /* DistanceToPoint.point: packed repeated double */
  put_bytes(&b, 1, id, strlen(id));
  put_bytes(&b, 2, "location", 8);
  put_bytes(&b, 3, score.bytes, score.len); /* distance_to_point */
  put_double(&b, 5, 300);                   /* threshold */
  put_double(&b, 7, 1000);                  /* clamp_hi (clamp_lo = 0) */
  put_varint(&b, 9 << 3 | 0);               /* horizon */
  put_varint(&b, horizon);
  put_double(&b, 11, epsilon);
  return b;
}

/* ---- a minimal DeviceReply reader ---- */
typedef struct {
  int status, error, values;
  double first_value, charged, remaining;
} reply_view;

static uint64_t get_varint(const uint8_t* p, size_t* i) {
  uint64_t v = 0;
  int shift = 0;
  while (p[*i] & 0x80) v |= (uint64_t)(p[(*i)++] & 0x7f) << shift, shift += 7;
  v |= (uint64_t)p[(*i)++] << shift;
  return v;
}
static double get_double(const uint8_t* p, size_t* i) {
  double v;
  memcpy(&v, p + *i, 8);
  *i += 8;
  return v;
}
static reply_view read_reply(const uint8_t* p, size_t len) {
  reply_view r = {0, 0, 0, 0, 0, 0};
  size_t i = 0;
  while (i < len) {
    uint64_t key = get_varint(p, &i);
    int field = (int)(key >> 3), type = (int)(key & 7);
    if (type == 0) {
      uint64_t v = get_varint(p, &i);
      if (field == 2) r.status = (int)v;
      if (field == 3) r.error = (int)v;
    } else if (type == 1) {
      double v = get_double(p, &i);
      if (field == 6) r.charged = v;
      if (field == 7) r.remaining = v;
    } else if (type == 2) {
      size_t n = (size_t)get_varint(p, &i);
      if (field == 5) {
        r.values = (int)(n / 8);
        if (n >= 8) memcpy(&r.first_value, p + i, 8);
      }
      i += n;
    } else {
      break;
    }
  }
  return r;
}

enum { ANSWERED = 1, REFUSED_BUDGET = 2, REJECTED_INVALID = 3 };

int main(void) {
  uint8_t reply[4096];
  size_t reply_len = 0;
  double remaining = -1;

  /* Opening: a bad configuration is a named error and no device. */
  cgp_device* device = (cgp_device*)1;
  uint8_t garbage[3] = {0xff, 0xff, 0xff};
  CHECK(cgp_device_open(NULL, garbage, sizeof garbage, &device) == CGP_MALFORMED_MESSAGE);
  CHECK(device == NULL);
  CHECK(strlen(cgp_device_last_error(NULL)) > 0);
  buffer negative = cgp_config(-1);
  CHECK(cgp_device_open(NULL, negative.bytes, negative.len, &device) == CGP_NOT_POSITIVE);
  CHECK(strstr(cgp_device_last_error(NULL), "budget") != NULL);
  CHECK(cgp_device_open(NULL, NULL, 0, NULL) == CGP_INVALID_ARGUMENT);

  buffer config = cgp_config(1.0);
  CHECK(cgp_device_open(NULL, config.bytes, config.len, &device) == CGP_OK);
  CHECK(device != NULL);
  double here[2] = {3, 4}, bad[2] = {NAN, 0};
  CHECK(cgp_device_set_component(device, "location", here, 2) == CGP_OK);
  CHECK(cgp_device_set_component(device, "location", bad, 2) == CGP_NOT_FINITE);
  CHECK(strstr(cgp_device_last_error(device), "values") != NULL);
  CHECK(cgp_device_set_component(device, "location", here, 3) == CGP_DIMENSION_MISMATCH);

  /* A too-small buffer: distinct status, the needed length, no charge. */
  buffer request = location_request("q", 1, 0.1);
  CHECK(cgp_device_handle(device, request.bytes, request.len, reply, 4, &reply_len) ==
        CGP_BUFFER_TOO_SMALL);
  CHECK(reply_len > 4 && reply_len <= sizeof reply);
  CHECK(cgp_device_remaining(device, &remaining) == CGP_OK && remaining == 1.0);

  /* An answer, then its replay: identical bytes, no new charge. */
  CHECK(cgp_device_handle(device, request.bytes, request.len, reply, sizeof reply, &reply_len) ==
        CGP_OK);
  reply_view answer = read_reply(reply, reply_len);
  CHECK(answer.status == ANSWERED);
  CHECK(answer.values == 2);
  CHECK(fabs(answer.first_value - 3) < 20); /* σ = 1/√0.2 ≈ 2.2 */
  CHECK(answer.charged >= 0.1 && answer.charged < 0.1003);
  CHECK(cgp_device_remaining(device, &remaining) == CGP_OK);
  CHECK(fabs(remaining - (1 - answer.charged)) < 1e-12);
  uint8_t again[4096];
  size_t again_len = 0;
  CHECK(cgp_device_handle(device, request.bytes, request.len, again, sizeof again, &again_len) ==
        CGP_OK);
  CHECK(again_len == reply_len && memcmp(again, reply, reply_len) == 0);
  double after_replay = -1;
  CHECK(cgp_device_remaining(device, &after_replay) == CGP_OK);
  CHECK(after_replay == remaining);

  /* Invalid and over-budget requests: replies that say so, nothing charged. */
  buffer invalid = location_request("q", 2, -1);
  CHECK(cgp_device_handle(device, invalid.bytes, invalid.len, reply, sizeof reply, &reply_len) ==
        CGP_OK);
  reply_view rejected = read_reply(reply, reply_len);
  CHECK(rejected.status == REJECTED_INVALID && rejected.error == CGP_NOT_POSITIVE);
  buffer greedy = location_request("q", 3, 5.0);
  CHECK(cgp_device_handle(device, greedy.bytes, greedy.len, reply, sizeof reply, &reply_len) ==
        CGP_OK);
  CHECK(read_reply(reply, reply_len).status == REFUSED_BUDGET);
  CHECK(cgp_device_remaining(device, &after_replay) == CGP_OK);
  CHECK(after_replay == remaining);
  CHECK(cgp_device_handle(NULL, request.bytes, request.len, reply, sizeof reply, &reply_len) ==
        CGP_INVALID_ARGUMENT);
  CHECK(cgp_device_handle(device, request.bytes, request.len, reply, sizeof reply, NULL) ==
        CGP_INVALID_ARGUMENT);
  cgp_device_close(device);

  /* A durable ledger: the budget survives close/reopen; a garbage file fails closed. */
  char path[256];
  snprintf(path, sizeof path, "/tmp/cgp-c-abi-%ld.db", (long)getpid());
  CHECK(cgp_device_open(path, config.bytes, config.len, &device) == CGP_OK);
  CHECK(cgp_device_set_component(device, "location", here, 2) == CGP_OK);
  CHECK(cgp_device_handle(device, request.bytes, request.len, reply, sizeof reply, &reply_len) ==
        CGP_OK);
  CHECK(cgp_device_remaining(device, &remaining) == CGP_OK);
  cgp_device_close(device);
  CHECK(cgp_device_open(path, config.bytes, config.len, &device) == CGP_OK);
  CHECK(cgp_device_remaining(device, &after_replay) == CGP_OK);
  CHECK(after_replay == remaining);
  cgp_device_close(device);
  char wal[300], shm[300];
  snprintf(wal, sizeof wal, "%s-wal", path);
  snprintf(shm, sizeof shm, "%s-shm", path);
  unlink(path), unlink(wal), unlink(shm);
  FILE* junk = fopen(path, "wb");
  for (int i = 0; i < 4096; ++i) fputc(0x5a, junk);
  fclose(junk);
  CHECK(cgp_device_open(path, config.bytes, config.len, &device) == CGP_LEDGER_FAILURE);
  CHECK(device != NULL);
  CHECK(strstr(cgp_device_last_error(device), "ledger") != NULL);
  CHECK(cgp_device_handle(device, request.bytes, request.len, reply, sizeof reply, &reply_len) ==
        CGP_OK);
  CHECK(read_reply(reply, reply_len).error == CGP_LEDGER_FAILURE);
  cgp_device_close(device);
  unlink(path), unlink(wal), unlink(shm);

  /* A replay after a restart, before the 512-d component is registered again:
   * the stored reply (4 KiB) is longer than anything the device would produce for what is
   * registered now. Never written past reply_capacity: BUFFER_TOO_SMALL with the true size,
   * and the retry gets the same stored bytes. The buffers are heap-allocated at their exact
   * capacity so that AddressSanitizer sees any overflow. */
  {
    enum { DIM = 512 };
    double* wide = (double*)malloc(DIM * sizeof(double));
    for (int i = 0; i < DIM; ++i) wide[i] = i;
    unlink(path), unlink(wal), unlink(shm);
    CHECK(cgp_device_open(path, config.bytes, config.len, &device) == CGP_OK);
    CHECK(cgp_device_set_component(device, "location", wide, DIM) == CGP_OK);
    buffer wide_request = location_request("wide", 1, 0.1);
    size_t first_len = 0;
    uint8_t* first = NULL;
    CHECK(cgp_device_handle(device, wide_request.bytes, wide_request.len, NULL, 0, &first_len) ==
          CGP_BUFFER_TOO_SMALL);
    first = (uint8_t*)malloc(first_len);
    CHECK(cgp_device_handle(device, wide_request.bytes, wide_request.len, first, first_len,
                            &first_len) == CGP_OK);
    CHECK(read_reply(first, first_len).status == ANSWERED);
    CHECK(read_reply(first, first_len).values == DIM);
    cgp_device_close(device);

    CHECK(cgp_device_open(path, config.bytes, config.len, &device) == CGP_OK);
    double before_replay = -1, after = -2;
    CHECK(cgp_device_remaining(device, &before_replay) == CGP_OK);
    size_t small_capacity = 600, needed = 0;
    uint8_t* small = (uint8_t*)malloc(small_capacity);
    CHECK(cgp_device_handle(device, wide_request.bytes, wide_request.len, small, small_capacity,
                            &needed) == CGP_BUFFER_TOO_SMALL);
    CHECK(needed == first_len);
    uint8_t* exact = (uint8_t*)malloc(needed);
    size_t replay_len = 0;
    CHECK(cgp_device_handle(device, wide_request.bytes, wide_request.len, exact, needed,
                            &replay_len) == CGP_OK);
    CHECK(replay_len == first_len && memcmp(exact, first, first_len) == 0);
    CHECK(cgp_device_remaining(device, &after) == CGP_OK);
    CHECK(after == before_replay);
    cgp_device_close(device);
    free(small), free(exact), free(first), free(wide);
  }

  /* One live handle per ledger file: a second open fails closed by name. */
  {
    cgp_device *first_handle = NULL, *second_handle = NULL;
    CHECK(cgp_device_open(path, config.bytes, config.len, &first_handle) == CGP_OK);
    CHECK(cgp_device_open(path, config.bytes, config.len, &second_handle) == CGP_LEDGER_IN_USE);
    CHECK(second_handle != NULL);
    CHECK(strstr(cgp_device_last_error(second_handle), "another") != NULL);
    double none = -1;
    CHECK(cgp_device_remaining(second_handle, &none) == CGP_OK);
    CHECK(none == 0);
    cgp_device_close(second_handle);
    cgp_device_close(first_handle);
    CHECK(cgp_device_open(path, config.bytes, config.len, &first_handle) == CGP_OK);
    cgp_device_close(first_handle);
    unlink(path);
  }

  /* Watches: armed once, a named error for bad specs and ticks, decisions durable. */
  {
    unlink(path), unlink(wal), unlink(shm);
    CHECK(cgp_device_open(path, config.bytes, config.len, &device) == CGP_OK);
    CHECK(cgp_device_set_component(device, "location", here, 2) == CGP_OK); /* 5 m from (0, 0) */
    double before = -1, after = -1;
    CHECK(cgp_device_remaining(device, &before) == CGP_OK);
    int started = -1, outcome = -1;
    buffer bad_spec = geofence_spec("fence", 0, 0, -1, 10);
    CHECK(cgp_device_start_watch(device, bad_spec.bytes, bad_spec.len, &started) ==
          CGP_NOT_POSITIVE);
    CHECK(strstr(cgp_device_last_error(device), "epsilon") != NULL);
    CHECK(cgp_device_start_watch(device, garbage, sizeof garbage, &started) ==
          CGP_MALFORMED_MESSAGE);
    CHECK(cgp_device_remaining(device, &after) == CGP_OK);
    CHECK(after == before);
    /* ε = 1 per metre: noise scales 2 m and 4 m, 295 m inside: alerts at tick 1 except with
     * probability below e^-70. */
    buffer spec = geofence_spec("fence", 0, 0, 1.0, 10);
    CHECK(cgp_device_start_watch(device, spec.bytes, spec.len, &started) == CGP_OK);
    CHECK(started == CGP_WATCH_ARMED);
    CHECK(cgp_device_remaining(device, &after) == CGP_OK);
    CHECK(after < before && after > before - 0.51);
    CHECK(cgp_device_start_watch(device, spec.bytes, spec.len, &started) == CGP_OK);
    CHECK(started == CGP_WATCH_ARMED);
    double replayed = -1;
    CHECK(cgp_device_remaining(device, &replayed) == CGP_OK);
    CHECK(replayed == after);
    CHECK(cgp_device_tick_watch(device, "nope", 1, &outcome) == CGP_UNKNOWN_WATCH);
    CHECK(cgp_device_tick_watch(device, "fence", 0, &outcome) == CGP_OUT_OF_RANGE);
    CHECK(cgp_device_tick_watch(device, "fence", 11, &outcome) == CGP_OUT_OF_RANGE);
    CHECK(cgp_device_tick_watch(device, "fence", 1, NULL) == CGP_INVALID_ARGUMENT);
    CHECK(cgp_device_tick_watch(device, "fence", 1, &outcome) == CGP_OK);
    CHECK(outcome == CGP_TICK_ALERT);
    CHECK(cgp_device_tick_watch(device, "fence", 2, &outcome) == CGP_OK);
    CHECK(outcome == CGP_TICK_FINISHED);
    buffer greedy_spec = geofence_spec("greedy", 0, 0, 2.0, 10); /* ρ ≈ 2 > what is left */
    CHECK(cgp_device_start_watch(device, greedy_spec.bytes, greedy_spec.len, &started) == CGP_OK);
    CHECK(started == CGP_WATCH_REFUSED_BUDGET);
    cgp_device_close(device);
    CHECK(cgp_device_open(path, config.bytes, config.len, &device) == CGP_OK);
    CHECK(cgp_device_set_component(device, "location", here, 2) == CGP_OK);
    CHECK(cgp_device_tick_watch(device, "fence", 1, &outcome) == CGP_OK);
    CHECK(outcome == CGP_TICK_ALERT); /* the recorded decision, after a restart */
    cgp_device_close(device);
    unlink(path), unlink(wal), unlink(shm);
  }

  CHECK(strcmp(cgp_status_name(CGP_UNKNOWN_WATCH), "unknown_watch") == 0);
  CHECK(strcmp(cgp_status_name(CGP_LEDGER_FAILURE), "ledger_failure") == 0);
  CHECK(strcmp(cgp_status_name(CGP_LEDGER_IN_USE), "ledger_in_use") == 0);
  CHECK(strcmp(cgp_status_name(CGP_REPLY_PRUNED), "reply_pruned") == 0);
  CHECK(strcmp(cgp_status_name(CGP_BUFFER_TOO_SMALL), "buffer_too_small") == 0);
  CHECK(strcmp(cgp_status_name(999), "unknown_error") == 0);
  CHECK(strcmp(cgp_status_name(CGP_ALREADY_EXISTS), "already_exists") == 0);
  /* "MAJOR.MINOR.PATCH", the header's version. */
  char header_version[32];
  snprintf(header_version, sizeof header_version, "%d.%d.%d", CGP_VERSION_MAJOR, CGP_VERSION_MINOR,
           CGP_VERSION_PATCH);
  CHECK(strcmp(cgp_version_string(), header_version) == 0);

  /* Opening without a protobuf encoder: the same device and the same named errors. */
  cgp_device* simple = (cgp_device*)1;
  CHECK(cgp_device_open_cgp(NULL, -1, 0, &simple) == CGP_NOT_POSITIVE);
  CHECK(simple == NULL);
  CHECK(strstr(cgp_device_last_error(NULL), "budget") != NULL);
  CHECK(cgp_device_open_cgp(NULL, NAN, 0, &simple) == CGP_NOT_FINITE);
  CHECK(cgp_device_open_cgp(NULL, 1.0, 0, NULL) == CGP_INVALID_ARGUMENT);
  CHECK(cgp_device_open_cgp(NULL, 0.25, 1, &simple) == CGP_OK);
  CHECK(cgp_device_set_component(simple, "location", here, 2) == CGP_OK);
  buffer simple_request = location_request("simple", 1, 0.1);
  CHECK(cgp_device_handle(simple, simple_request.bytes, simple_request.len, reply, sizeof reply,
                          &reply_len) == CGP_OK);
  CHECK(read_reply(reply, reply_len).status == ANSWERED);
  CHECK(cgp_device_remaining(simple, &remaining) == CGP_OK);
  CHECK(remaining < 0.25 - 0.1 + 1e-9 && remaining > 0.25 - 0.1 - 1e-3);
  /* sticky HALT: a refusal for budget, then even an affordable request is refused. */
  buffer too_dear = location_request("simple", 2, 0.2);
  CHECK(cgp_device_handle(simple, too_dear.bytes, too_dear.len, reply, sizeof reply, &reply_len) ==
        CGP_OK);
  CHECK(read_reply(reply, reply_len).status == REFUSED_BUDGET);
  buffer small = location_request("simple", 3, 0.01);
  CHECK(cgp_device_handle(simple, small.bytes, small.len, reply, sizeof reply, &reply_len) ==
        CGP_OK);
  CHECK(read_reply(reply, reply_len).status == REFUSED_BUDGET);
  /* GPS lon/lat projected on the device in the coordinator's frame. */
  CHECK(cgp_device_set_location_lonlat(simple, "gps", -73.96, 40.76) == CGP_INVALID_ARGUMENT);
  CHECK(strstr(cgp_device_last_error(simple), "frame") != NULL);
  CHECK(cgp_device_set_location_frame(simple, 7, 0, 0) == CGP_INVALID_ARGUMENT);
  CHECK(cgp_device_set_location_frame(simple, CGP_PROJECTION_LOCAL_EQUIDISTANT, -73.97, 95) ==
        CGP_OUT_OF_RANGE);
  CHECK(cgp_device_set_location_frame(simple, CGP_PROJECTION_LOCAL_EQUIDISTANT, -73.97, 40.75) ==
        CGP_OK);
  CHECK(cgp_device_set_location_lonlat(simple, "gps", -73.96, NAN) == CGP_NOT_FINITE);
  CHECK(cgp_device_set_location_lonlat(simple, "gps", -73.96, 40.76) == CGP_OK);
  cgp_device_close(simple);
  cgp_device_close(NULL);

  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
