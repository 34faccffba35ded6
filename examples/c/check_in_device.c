/* A phone's background task in C (README "Embedding"): open the device, check in with the
 * coordinator over TLS, answer what it queued for this device, leave. The OS runs it again
 * later (Android WorkManager, iOS BGTaskScheduler); the ledger keeps the budget in between.
 *
 *   cgp-check-in-device ADDRESS DEVICE_ID CREDENTIAL_FILE ROOT_PEM_FILE LEDGER LON LAT
 *
 * Exit 0 after a check-in (it prints the remaining budget), 1 if the link failed, 2 on bad
 * arguments or files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgp/cgp_link.h"

/* A whole file, NUL-terminated (trailing newlines dropped); NULL if unreadable. */
static char* read_file(const char* path, size_t* length) {
  FILE* file = fopen(path, "rb");
  if (!file) return NULL;
  char* text = NULL;
  size_t size = 0, used = 0, got;
  do {
    if (used + 4096 + 1 > size) {
      size = 2 * size + 4096 + 1;
      char* grown = realloc(text, size);
      if (!grown) break;
      text = grown;
    }
    got = fread(text + used, 1, size - used - 1, file);
    used += got;
  } while (got > 0);
  fclose(file);
  if (!text) return NULL;
  while (used > 0 && (text[used - 1] == '\n' || text[used - 1] == '\r')) --used;
  text[used] = '\0';
  *length = used;
  return text;
}

static int failed(const char* what, int status, const char* message) {
  fprintf(stderr, "cgp-check-in-device: %s: %s (%s)\n", what, message, cgp_status_name(status));
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 8) {
    fprintf(stderr, "usage: %s ADDRESS DEVICE_ID CREDENTIAL_FILE ROOT_PEM_FILE LEDGER LON LAT\n",
            argv[0]);
    return 2;
  }
  size_t credential_len = 0, root_len = 0;
  char* credential = read_file(argv[3], &credential_len);
  char* root = read_file(argv[4], &root_len);
  char* end_lon = NULL;
  char* end_lat = NULL;
  const double lon = strtod(argv[6], &end_lon), lat = strtod(argv[7], &end_lat);
  if (!credential || !root || *end_lon != '\0' || *end_lat != '\0') {
    fprintf(stderr, "cgp-check-in-device: unreadable credential or root file, or bad LON/LAT\n");
    free(credential);
    free(root);
    return 2;
  }

  int exit_code = 1;
  cgp_device* device = NULL;
  cgp_connection* link = NULL;
  int status = cgp_device_open_cgp(argv[5], 1.0, 0, &device);
  if (status != CGP_OK) {
    exit_code = failed("open", status, cgp_device_last_error(device));
    goto done;
  }
  status = cgp_device_connect(device, argv[1], argv[2], &link);
  if (status == CGP_OK)
    status = cgp_connection_set_credential(link, (const uint8_t*)credential, credential_len);
  if (status == CGP_OK) status = cgp_connection_set_tls_root(link, root);
  if (status == CGP_OK) status = cgp_connection_set_check_in(link, 1000);
  if (status == CGP_OK) status = cgp_connection_set_lonlat(link, lon, lat);
  if (status != CGP_OK) {
    fprintf(stderr, "cgp-check-in-device: %s\n", cgp_connection_last_error(link));
    exit_code = 2;
    goto done;
  }
  /* Blocking: returns once nothing has been asked for 1 s. */
  status = cgp_connection_run_once(link);
  if (status != CGP_OK) {
    exit_code = failed("check-in", status, cgp_connection_last_error(link));
    goto done;
  }
  double remaining = 0;
  if (cgp_device_remaining(device, &remaining) == CGP_OK) printf("remaining %.17g\n", remaining);
  exit_code = 0;
done:
  cgp_connection_free(link); /* before the device it serves */
  cgp_device_close(device);
  free(credential);
  free(root);
  return exit_code;
}
