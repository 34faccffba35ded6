/* cgpkit device C ABI — the contract for mobile and IoT apps.
 *
 * One cgp_device is one user: it keeps the user's components and privacy filter and answers
 * a coordinator's requests (serialized cgp.v1.DeviceRequest, see cgp.proto) with serialized
 * cgp.v1.DeviceReply bytes. Every charge is durably recorded before a reply is returned.
 * Noise comes from the OS CSPRNG (libsodium). No C++ exception crosses this interface.
 *
 * Every function returns an int status, 0 on success, unless stated otherwise. The non-zero
 * values are the cgp.v1.ErrorCode numbers below, plus CGP_OUT_OF_MEMORY and CGP_INTERNAL.
 * A status must be checked: the compiler warns when one is ignored (CGP_NODISCARD).
 *
 * THREAD SAFETY
 * A cgp_device may be called from several threads: every call on a device holds the device's
 * lock, so calls on one device run one at a time (a cgp_device_handle that writes the ledger
 * makes a concurrent cgp_device_remaining wait for it). The device link (cgp/cgp_link.h) takes
 * the same lock while it answers a coordinator, so an app may set a new GPS fix while its link
 * serves. Different devices never wait for each other. Functions that take no device
 * (cgp_device_open, cgp_device_open_cgp, cgp_status_name, cgp_version_string) may be called
 * from any thread at any time. Error messages are kept per thread (cgp_device_last_error).
 *
 * LIFETIME
 * A device lives from a successful (or fail-closed) open until cgp_device_close, which must
 * not race with another call on it and must come after cgp_connection_free of every link
 * serving it. Every pointer passed in is only read during the call (the device keeps copies).
 * Strings returned are owned by the library: cgp_status_name and cgp_version_string are
 * static; cgp_device_last_error is valid until this thread's next call into cgpkit.
 * A device must not be used in a child after fork(): there it refuses to charge. */
#ifndef CGP_CGP_H
#define CGP_CGP_H

#include <stddef.h>
#include <stdint.h>

/* CGP_API: exported from a shared libcgpkit_client (default visibility; dllexport/dllimport
 * on Windows when CGP_SHARED is defined). CGP_NODISCARD: a status that must not be ignored. */
#if defined(_WIN32) && defined(CGP_SHARED)
#ifdef CGP_BUILDING_LIBRARY
#define CGP_API __declspec(dllexport)
#else
#define CGP_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) || defined(__clang__)
#define CGP_API __attribute__((visibility("default")))
#else
#define CGP_API
#endif
#if defined(__GNUC__) || defined(__clang__)
#define CGP_NODISCARD __attribute__((warn_unused_result))
#else
#define CGP_NODISCARD
#endif

/* The version this header belongs to; cgp_version_string() is the library's (they differ only
 * when an app is built against one release and runs with another). */
#define CGP_VERSION_MAJOR 0
#define CGP_VERSION_MINOR 2
#define CGP_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cgp_device cgp_device;

enum cgp_status {
  CGP_OK = 0,
  CGP_NOT_FINITE = 1,
  CGP_NOT_POSITIVE = 2,
  CGP_OUT_OF_RANGE = 3,
  CGP_DIMENSION_MISMATCH = 4,
  CGP_EMPTY_POLYGON = 5,
  CGP_DEGENERATE_POLYGON = 6,
  CGP_SELF_INTERSECTING_POLYGON = 7,
  CGP_TOO_LARGE = 8,
  CGP_MALFORMED_MESSAGE = 9,
  CGP_MISSING_FIELD = 10,
  CGP_UNKNOWN_COMPONENT = 11,
  CGP_INVALID_ARGUMENT = 12, /* also: a NULL pointer where one is required */
  CGP_REQUEST_CONFLICT = 13,
  CGP_LEDGER_FAILURE = 14,
  CGP_COMPONENT_NOT_SET = 15,
  CGP_BUFFER_TOO_SMALL = 16,
  CGP_REPLY_PRUNED = 17,      /* a replay of an id whose reply the retention policy pruned */
  CGP_LEDGER_IN_USE = 18,     /* the ledger file is open in another live handle or process */
  CGP_INTERNAL_ERROR = 19,    /* unexpected failure inside the device; nothing was charged */
  CGP_INCOMPLETE_QUERY = 20,  /* coordinator only: too few users answered */
  CGP_UNAVAILABLE = 21,       /* network: the peer cannot be reached; retry later */
  CGP_UNAUTHENTICATED = 22,   /* network: a credential is missing or refused */
  CGP_DEADLINE_EXCEEDED = 23, /* network: no answer in time */
  CGP_ALREADY_EXISTS = 24,    /* tools: refusing to replace an id or a file */
  CGP_UNKNOWN_WATCH = 25,     /* a tick names a watch this device does not have */
  CGP_OUT_OF_MEMORY = 100,
  CGP_INTERNAL = 101
};

/* Opens a device. ledger_path: an SQLite file (created if absent), or NULL for a ledger in
 * memory. config: a serialized cgp.v1.DeviceConfig. On success *out is a new device.
 * NULL ledger_path: the budget lives in this process only and STARTS OVER at every process
 * start (each start is a fresh budget for the same user): use it for tests and demos, never
 * for a user's device. A file ledger is held exclusively by one open device at a time (also
 * across processes); a device inherited by a forked child refuses to charge there.
 * On CGP_LEDGER_FAILURE or CGP_LEDGER_IN_USE (the file is open in another cgp_device, in this
 * process or another) *out is still a device, one that fails closed: it rejects every request
 * with that code (cgp_device_last_error says why) and never resets the budget; close it.
 * Deleting a ledger file cannot be detected once it is gone: a device with no file is a new
 * device. An app that must prevent that anchors the ledger to something it cannot lose
 * silently (e.g. a counter in the platform keystore); see the README.
 * On any other error *out is NULL and cgp_device_last_error(NULL) gives this thread's message. */
CGP_API CGP_NODISCARD int cgp_device_open(const char* ledger_path, const uint8_t* config,
                                          size_t config_len, cgp_device** out);

/* cgp_device_open without a protobuf encoder: a CGP filter of `budget` (in ρ, finite and
 * > 0) with sticky HALT if `sticky_halt` is non-zero (once a request is refused for budget,
 * every later one is refused too). Errors as cgp_device_open: CGP_NOT_POSITIVE or
 * CGP_NOT_FINITE for the budget (named "budget" in the message), CGP_OUT_OF_RANGE beyond the
 * supported capacity, CGP_INVALID_ARGUMENT for a NULL out. */
CGP_API CGP_NODISCARD int cgp_device_open_cgp(const char* ledger_path, double budget,
                                              int sticky_halt, cgp_device** out);

/* Sets component component_id (a NUL-terminated UTF-8 id, registered on first use with this
 * dimension) to values[0..dim). The dimension of a component cannot change. */
CGP_API CGP_NODISCARD int cgp_device_set_component(cgp_device* device, const char* component_id,
                                                   const double* values, size_t dim);

/* ---- Location frame: GPS lon/lat projected on the device (docs/protocol.md) ---------------- */

enum cgp_projection {
  CGP_PROJECTION_LOCAL_EQUIDISTANT = 1, /* azimuthal equidistant (WGS 84) around the origin */
  CGP_PROJECTION_SPHERICAL_MERCATOR = 2 /* a coordinator's frame only: refused on devices */
};

/* Keeps the coordinator's location frame, as its Welcome announces it (Welcome.frame:
 * projection, origin_lon, origin_lat in degrees), and re-projects into it every component set
 * from lon/lat. Only local frames are taken: a Mercator frame is CGP_INVALID_ARGUMENT naming
 * "frame.projection" (it stretches distances by 1/cos(lat) and has a seam), wherever the user
 * is. Errors: CGP_INVALID_ARGUMENT for an unknown projection, CGP_OUT_OF_RANGE /
 * CGP_NOT_FINITE for the origin (named in the message). */
CGP_API CGP_NODISCARD int cgp_device_set_location_frame(cgp_device* device, int projection,
                                                        double origin_lon, double origin_lat);

/* Sets a 2-D component (registered on first use, unit metres) to the device's GPS position
 * projected in the frame of cgp_device_set_location_frame: the phone never needs the
 * coordinator's metres. Within 1,500 km (geodesic) of the frame's origin the position is the
 * frame's own projection; beyond, it is clamped towards the origin by a public rule, so that
 * every valid position is placed and the map is Lipschitz in ground metres with constant
 * <= 1.0094, plus at most 1 cm (common/src/geometry/frame_projection.md): no frame a coordinator
 * announces, and no position, weakens rho by more than that factor squared, and no outcome depends
 * on where the user is. A request stamped with another frame is rejected (its error names "frame"),
 * charged nothing. Errors: CGP_INVALID_ARGUMENT "frame" before a frame is set;
 * CGP_OUT_OF_RANGE / CGP_NOT_FINITE for lon or lat; CGP_DIMENSION_MISMATCH if the component
 * exists with another dimension. */
CGP_API CGP_NODISCARD int cgp_device_set_location_lonlat(cgp_device* device,
                                                         const char* component_id, double lon,
                                                         double lat);

/* Answers one request. reply receives a serialized cgp.v1.DeviceReply of *reply_len bytes; its
 * status field says answered, refused_budget or rejected_invalid. Never writes more than
 * reply_capacity bytes: if the reply would not fit, returns CGP_BUFFER_TOO_SMALL with the
 * needed length in *reply_len and does nothing else: no charge, no noise. A request id
 * answered before gets the identical bytes again (within the retention window: replies are
 * kept up to 8 MiB and 7 days; an older replay is REPLY_PRUNED, charged nothing). */
CGP_API CGP_NODISCARD int cgp_device_handle(cgp_device* device, const uint8_t* request,
                                            size_t request_len, uint8_t* reply,
                                            size_t reply_capacity, size_t* reply_len);

/* ---- Watches: "tell the coordinator when this device first comes within 300 m of p" --------
 * Above Threshold evaluated on the device (README "Watches", client-sdk/src/watch.md). */

enum cgp_watch_start {
  CGP_WATCH_REFUSED_BUDGET = 0, /* the charge does not fit the budget: nothing armed or charged */
  CGP_WATCH_ARMED = 1           /* armed now, or armed before with the same spec (charged once) */
};

/* Arms a watch. spec: a serialized cgp.v1.WatchSpec (as received from the coordinator). On
 * CGP_OK, *started is a cgp_watch_start. A laplace watch charges the budget
 * ρ = (ε(1 + 2^-10))²/2 once, recorded in the ledger together with the watch's secret
 * threshold noise before this returns. Starting the same spec again charges nothing; the same
 * watch_id with another spec is CGP_REQUEST_CONFLICT. Any error charges nothing (the spec's
 * named error, CGP_UNKNOWN_COMPONENT, CGP_DIMENSION_MISMATCH, CGP_LEDGER_FAILURE, ...). */
CGP_API CGP_NODISCARD int cgp_device_start_watch(cgp_device* device, const uint8_t* spec,
                                                 size_t spec_len, int* started);

enum cgp_watch_tick {
  CGP_TICK_SILENT = 0,          /* evaluated: no crossing (send nothing) */
  CGP_TICK_ALERT = 1,           /* evaluated: the first noisy crossing (send the tick index) */
  CGP_TICK_FINISHED = 2,        /* not evaluated: the watch alerted at an earlier tick */
  CGP_TICK_BUDGET_EXHAUSTED = 3 /* not evaluated: the watch's ex-post budget is used up */
};

/* Evaluates watch watch_id at tick `tick` (1..horizon) on the component's current value; on
 * CGP_OK *outcome is a cgp_watch_tick. The decision is durable before this returns, and the
 * same tick asked again (also after a restart) returns it again. Call it on the watch's public
 * schedule (e.g. once a minute), never because the user moved: which ticks are evaluated must
 * not depend on the user's data. Errors, nothing evaluated: CGP_UNKNOWN_WATCH,
 * CGP_OUT_OF_RANGE (tick 0, past the horizon, or before the last evaluated tick),
 * CGP_COMPONENT_NOT_SET, CGP_DIMENSION_MISMATCH, CGP_LEDGER_FAILURE. */
CGP_API CGP_NODISCARD int cgp_device_tick_watch(cgp_device* device, const char* watch_id,
                                                uint64_t tick, int* outcome);

/* The remaining budget, in ρ units (0 for a device that fails closed). */
CGP_API CGP_NODISCARD int cgp_device_remaining(const cgp_device* device, double* out);

/* The message of this thread's last failed call if it was on this device ("" otherwise); with
 * NULL, of this thread's last failed cgp_device_open. Valid until this thread's next call. */
CGP_API const char* cgp_device_last_error(const cgp_device* device);

/* The name of a status code, e.g. "ledger_failure"; "unknown_error" for others. */
CGP_API const char* cgp_status_name(int status);

/* cgpkit's version, "MAJOR.MINOR.PATCH" (static storage; any thread). */
CGP_API const char* cgp_version_string(void);

/* Closes the device (NULL is allowed). Its ledger stays on disk. */
CGP_API void cgp_device_close(cgp_device* device);

#ifdef __cplusplus
}
#endif

#endif /* CGP_CGP_H */
