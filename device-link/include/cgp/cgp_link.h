/* cgpkit device link C ABI — a device's side of the network, for apps that do not speak the
 * coordinator's stream protocol themselves (docs/protocol.md describes it for those that do).
 *
 * A cgp_connection links one cgp_device (cgp/cgp.h) to one coordinator: it dials
 * (gRPC over HTTP/2, TLS when a root certificate is given), says Hello with the device's id and
 * credential, takes the coordinator's location frame from its Welcome, and answers every
 * request the coordinator sends with the device's own filter, charge and noise (the same path
 * as cgp_device_handle). Watches the coordinator starts are armed and ticked on the link's
 * thread. A coordinator that accepts the connection but sends no Welcome within 10 s is left.
 *
 * Two ways to run it, chosen per call:
 *   - cgp_connection_run_once: BLOCKING, in the caller's thread. One session: dial, serve until
 *     the coordinator ends the stream, the connection fails, cgp_connection_stop is called, or
 *     (check-in mode) nothing has been asked for a while. For phones whose OS grants a
 *     background task now and then (Android WorkManager, iOS BGTaskScheduler): set
 *     cgp_connection_set_check_in, call run_once from the task, return when it does.
 *   - cgp_connection_start: NON-BLOCKING. The link gets its own thread, which serves session
 *     after session, dialling again with backoff (100 ms doubling to 5 s; back to 100 ms after a
 *     session of 5 s or more; each wait ±20%) until cgp_connection_stop — or until the
 *     coordinator refuses the credential or the Hello (device_id, protocol version), or
 *     announces a frame this device cannot take, which no redial mends.
 *
 * Every function returns an int status, 0 on success (the codes of cgp.h): CGP_INVALID_ARGUMENT
 * for a NULL pointer or a call in the wrong state, CGP_UNAVAILABLE (the coordinator cannot be
 * reached), CGP_UNAUTHENTICATED (the credential was refused), CGP_DEADLINE_EXCEEDED (no Welcome
 * in 10 s), a named value error for bad settings. Nothing is ever charged by a failed call, and
 * a request the device has begun to answer is finished and its reply sent before any stop or
 * check-in end closes the stream (charge and reply stay together). A credential is only ever
 * sent over TLS: a run with a credential and no TLS root is refused (CGP_INVALID_ARGUMENT
 * naming tls_root).
 *
 * THREAD SAFETY
 * Every function may be called from any thread. Calls on the device (cgp.h) from the app's
 * threads wait while the link answers a request, and the link waits for them: the device's lock
 * serializes both. One run at a time per connection: run_once or start while a run is in
 * progress is CGP_INVALID_ARGUMENT. Settings apply from the next session on, except
 * cgp_connection_set_lonlat, which also updates the device at once if its frame is known.
 * Error messages are kept per thread (cgp_connection_last_error).
 *
 * LIFETIME
 * A connection lives from cgp_device_connect until cgp_connection_free, which stops it first
 * and must not race another call on the same connection; its device must stay open until
 * then (close the device after freeing its connections).
 * Strings passed in are copied. cgp_connection_last_error's string is valid until this
 * thread's next call into cgpkit. */
#ifndef CGP_CGP_LINK_H
#define CGP_CGP_LINK_H

#include "cgp/cgp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cgp_connection cgp_connection;

/* A link for `device` to the coordinator at `address` ("host:port", or a gRPC target such as
 * "dns:///coordinator.example.org:7000") as `device_id` (1..128 bytes of A-Z a-z 0-9 . _ - : @
 * / +, the id the coordinator knows the device by). No network I/O happens here: run_once or
 * start dials. On success *out is a new connection, in plaintext with no credential until set
 * otherwise. Errors: CGP_INVALID_ARGUMENT for NULL arguments, an empty or over-long address or
 * id, spaces or controls in the address, other bytes in the id (each named). */
CGP_API CGP_NODISCARD int cgp_device_connect(cgp_device* device, const char* address,
                                             const char* device_id, cgp_connection** out);

/* The credential sent in Hello (1..4096 bytes, any bytes), as the coordinator's credential
 * file for this device holds it. Errors: CGP_INVALID_ARGUMENT (NULL, empty), CGP_TOO_LARGE. */
CGP_API CGP_NODISCARD int cgp_connection_set_credential(cgp_connection* connection,
                                                        const uint8_t* credential, size_t len);

/* TLS: the PEM root certificate that signed the coordinator's certificate (NUL-terminated, at
 * most 1 MiB, with a "-----BEGIN CERTIFICATE-----" block); NULL or "" goes back to plaintext
 * (then a credential is refused at the next run). A certificate gRPC cannot use shows as
 * CGP_UNAVAILABLE sessions (cgp_connection_last_session). */
CGP_API CGP_NODISCARD int cgp_connection_set_tls_root(cgp_connection* connection, const char* pem);

/* Check-in mode: a session ends, with CGP_OK, once no request has come for idle_ms (1 ms to
 * 1 h) after the Welcome: the device takes what the coordinator queued for it, answers, and
 * leaves. A request being answered is never cut. 0 turns it off (serve until the stream ends).
 * Errors: CGP_OUT_OF_RANGE "idle_ms". */
CGP_API CGP_NODISCARD int cgp_connection_set_check_in(cgp_connection* connection, uint32_t idle_ms);

/* The device's GPS position in degrees (lon in [-180, 180], lat in (-90, 90)): at every Welcome
 * projected on the device into component "location" in the frame the coordinator announces,
 * and, if a Welcome already announced one, at once (as cgp_device_set_location_lonlat). Call it
 * on every new fix. Errors: CGP_NOT_FINITE / CGP_OUT_OF_RANGE naming "lon" or "lat", or the
 * device's error for the projection (e.g. CGP_OUT_OF_RANGE "frame"); then nothing changed. */
CGP_API CGP_NODISCARD int cgp_connection_set_lonlat(cgp_connection* connection, double lon,
                                                    double lat);

/* What the device accepts of the watches a coordinator starts (each tick is a ledger write):
 * ticks no shorter than min_tick_seconds (0.001 to 1e7; default 1) and at most max_watches
 * (1 to 100000; default 64) ticking at once; others are refused by name, charging nothing. */
CGP_API CGP_NODISCARD int cgp_connection_set_watch_limits(cgp_connection* connection,
                                                          double min_tick_seconds,
                                                          size_t max_watches);

/* A live fleet spread over gateways (docs/cluster.md): shard_count (1 to 1048576) is the
 * fleet's number of virtual shards, and the connection's address is then a template whose
 * "{shard}" the link fills with this device's shard (SHA-256 of its id, docs/protocol.md §2c):
 * e.g. "s{shard}.devices.example.org:443". 0 goes back to one address. The template is checked
 * at the next run (an error naming "coordinator_address"). Errors: CGP_OUT_OF_RANGE
 * "shard_count". */
CGP_API CGP_NODISCARD int cgp_connection_set_virtual_shards(cgp_connection* connection,
                                                            uint32_t shard_count);

/* Dial host_port ("host:port") instead of the address's own host, keeping the address's host as
 * the name the certificate is checked against and SNI carries (curl's --connect-to); NULL or ""
 * turns it off. Errors: CGP_INVALID_ARGUMENT "connect_to" (not host:port, spaces, controls). */
CGP_API CGP_NODISCARD int cgp_connection_set_connect_to(cgp_connection* connection,
                                                        const char* host_port);

/* BLOCKING: one session in the calling thread (see above). CGP_OK when the coordinator ended
 * it, check-in mode ended it, or cgp_connection_stop did; otherwise the error that ended it. */
CGP_API CGP_NODISCARD int cgp_connection_run_once(cgp_connection* connection);

/* NON-BLOCKING: serves on the link's own thread, redialling with backoff, until stopped. What
 * ended an earlier started run on its own and was not collected by cgp_connection_stop is
 * forgotten. */
CGP_API CGP_NODISCARD int cgp_connection_start(cgp_connection* connection);

/* 1 while a run (run_once or start) is in progress, 0 otherwise: a started link that the
 * coordinator refused for good is 0, and cgp_connection_stop then says why. */
CGP_API int cgp_connection_running(const cgp_connection* connection);

/* Ends the run in progress, if any, and waits for it (a request being answered is finished
 * first, so its charge and reply stay together). Returns what ended the run: CGP_OK for a stop
 * or a normal end, or the error that ended a started link on its own (e.g.
 * CGP_UNAUTHENTICATED), once; CGP_OK when nothing ran. A stop when nothing runs does nothing:
 * it does not cancel a run that begins later. */
CGP_API CGP_NODISCARD int cgp_connection_stop(cgp_connection* connection);

/* What ended the connection's last session (CGP_OK if none has ended, or it ended normally),
 * e.g. CGP_UNAVAILABLE while a started link cannot reach its coordinator; the message is then
 * this thread's cgp_connection_last_error. Any thread, any time. */
CGP_API int cgp_connection_last_session(const cgp_connection* connection);

/* The message of this thread's last failed call if it was on this connection ("" otherwise);
 * with NULL, of this thread's last failed cgp_device_connect (or call with a NULL connection). */
CGP_API const char* cgp_connection_last_error(const cgp_connection* connection);

/* Stops the connection (as cgp_connection_stop) and frees it; NULL is allowed. */
CGP_API void cgp_connection_free(cgp_connection* connection);

#ifdef __cplusplus
}
#endif

#endif /* CGP_CGP_LINK_H */
