/* The smallest useful device app: open a device whose ledger lives in a file, give it the
 * phone's position, answer the coordinator's request bytes, report what is left. Built by
 * scripts/client_build.sh to measure the size of an app that embeds the device SDK.
 *   minimal_device LEDGER [REQUEST_FILE] */
#include <cgp/cgp.h>
#include <stdio.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s LEDGER [REQUEST_FILE]\n", argv[0]);
    return 2;
  }
  cgp_device* device = NULL;
  int status = cgp_device_open_cgp(argv[1], 1.0, 0, &device);
  if (status != CGP_OK) {
    fprintf(stderr, "open: %s: %s\n", cgp_status_name(status), cgp_device_last_error(device));
    cgp_device_close(device);
    return 1;
  }
  const double here[2] = {120.5, -30.25}; /* metres in the coordinator's frame */
  status = cgp_device_set_component(device, "location", here, 2);
  if (status == CGP_OK && argc > 2) {
    uint8_t request[4096], reply[4096];
    size_t request_len = 0, reply_len = 0;
    FILE* in = fopen(argv[2], "rb");
    if (in) {
      request_len = fread(request, 1, sizeof request, in);
      fclose(in);
    }
    status = cgp_device_handle(device, request, request_len, reply, sizeof reply, &reply_len);
    if (status == CGP_OK) fwrite(reply, 1, reply_len, stdout);
  }
  double remaining = 0;
  if (status == CGP_OK) status = cgp_device_remaining(device, &remaining);
  if (status != CGP_OK)
    fprintf(stderr, "%s: %s\n", cgp_status_name(status), cgp_device_last_error(device));
  else
    fprintf(stderr, "cgpkit %s: %g of the budget left\n", cgp_version_string(), remaining);
  cgp_device_close(device);
  return status == CGP_OK ? 0 : 1;
}
