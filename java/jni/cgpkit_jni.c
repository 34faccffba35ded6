/* The JNI side of org.cgpkit.Device: each native method calls cgp/cgp.h and turns a non-zero
 * status into org.cgpkit.CgpException(code, name, message). Written in C against the C ABI
 * only, so that an Android app builds the same file with the NDK. */
#include <cgp/cgp.h>
#include <jni.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The message is UTF-8 (it may quote an id or a path) and crosses as bytes: JNI's own strings
 * are "modified UTF-8", which CheckJNI refuses for characters outside the BMP. Each step stops
 * at a pending exception (no JNI call but cleanup follows one). */
static void throw_status(JNIEnv* env, int status, const char* message) {
  jclass type = (*env)->FindClass(env, "org/cgpkit/CgpException");
  if (!type) return; /* NoClassDefFoundError is pending */
  jmethodID make = (*env)->GetStaticMethodID(env, type, "fromNative",
                                             "(ILjava/lang/String;[B)Lorg/cgpkit/CgpException;");
  if (!make) return;
  jstring name = (*env)->NewStringUTF(env, cgp_status_name(status)); /* ASCII */
  if (!name) return;
  const char* text = message ? message : "";
  jsize n = (jsize)strlen(text);
  jbyteArray bytes = (*env)->NewByteArray(env, n);
  if (!bytes) return; /* OutOfMemoryError is pending */
  (*env)->SetByteArrayRegion(env, bytes, 0, n, (const jbyte*)text);
  jobject error = (*env)->CallStaticObjectMethod(env, type, make, (jint)status, name, bytes);
  if (error && !(*env)->ExceptionCheck(env)) (*env)->Throw(env, (jthrowable)error);
}

static void throw_device_status(JNIEnv* env, const cgp_device* device, int status) {
  throw_status(env, status, cgp_device_last_error(device));
}

/* A copy of a Java byte[], NUL-terminated for the strings among them (NULL for null); *failed
 * on allocation failure (OutOfMemory is then pending as a CgpException). */
static char* c_string(JNIEnv* env, jbyteArray bytes, int* failed) {
  *failed = 0;
  if (!bytes) return NULL;
  jsize n = (*env)->GetArrayLength(env, bytes);
  char* out = malloc((size_t)n + 1);
  if (!out) {
    *failed = 1;
    throw_status(env, CGP_OUT_OF_MEMORY, "out of memory");
    return NULL;
  }
  (*env)->GetByteArrayRegion(env, bytes, 0, n, (jbyte*)out);
  out[n] = '\0';
  return out;
}

static cgp_device* device_of(jlong handle) {
  return (cgp_device*)(intptr_t)handle;
}

JNIEXPORT jlong JNICALL Java_org_cgpkit_Device_nativeOpenCgp(JNIEnv* env, jclass cls,
                                                             jbyteArray ledger, jdouble budget,
                                                             jboolean sticky) {
  (void)cls;
  int failed;
  char* path = c_string(env, ledger, &failed);
  if (failed) return 0;
  cgp_device* device = NULL;
  int status = cgp_device_open_cgp(path, budget, sticky ? 1 : 0, &device);
  free(path);
  if (status != CGP_OK) {
    /* A device that opened fail-closed (ledger_failure, ledger_in_use) is closed here: Java
     * gets the exception, never a device that refuses everything. */
    throw_device_status(env, device, status);
    cgp_device_close(device);
    return 0;
  }
  return (jlong)(intptr_t)device;
}

JNIEXPORT void JNICALL Java_org_cgpkit_Device_nativeSetComponent(JNIEnv* env, jclass cls,
                                                                 jlong handle, jbyteArray id,
                                                                 jdoubleArray values) {
  (void)cls;
  int failed;
  char* component = c_string(env, id, &failed);
  if (failed) return;
  jsize n = (*env)->GetArrayLength(env, values);
  double* copy = malloc(((size_t)n + 1) * sizeof *copy);
  if (!copy) {
    free(component);
    throw_status(env, CGP_OUT_OF_MEMORY, "out of memory");
    return;
  }
  (*env)->GetDoubleArrayRegion(env, values, 0, n, copy);
  int status = cgp_device_set_component(device_of(handle), component, copy, (size_t)n);
  free(copy);
  free(component);
  if (status != CGP_OK) throw_device_status(env, device_of(handle), status);
}

JNIEXPORT void JNICALL Java_org_cgpkit_Device_nativeSetLocationFrame(JNIEnv* env, jclass cls,
                                                                     jlong handle, jint projection,
                                                                     jdouble lon, jdouble lat) {
  (void)cls;
  int status = cgp_device_set_location_frame(device_of(handle), projection, lon, lat);
  if (status != CGP_OK) throw_device_status(env, device_of(handle), status);
}

JNIEXPORT void JNICALL Java_org_cgpkit_Device_nativeSetLocationLonLat(JNIEnv* env, jclass cls,
                                                                      jlong handle, jbyteArray id,
                                                                      jdouble lon, jdouble lat) {
  (void)cls;
  int failed;
  char* component = c_string(env, id, &failed);
  if (failed) return;
  int status = cgp_device_set_location_lonlat(device_of(handle), component, lon, lat);
  free(component);
  if (status != CGP_OK) throw_device_status(env, device_of(handle), status);
}

JNIEXPORT jbyteArray JNICALL Java_org_cgpkit_Device_nativeHandle(JNIEnv* env, jclass cls,
                                                                 jlong handle, jbyteArray request) {
  (void)cls;
  cgp_device* device = device_of(handle);
  jsize request_len = (*env)->GetArrayLength(env, request);
  int failed;
  uint8_t* bytes = (uint8_t*)c_string(env, request, &failed);
  if (failed) return NULL;
  /* A reply that does not fit is not produced (nothing charged): retry with its length. */
  size_t capacity = 4096, reply_len = 0;
  uint8_t* reply = NULL;
  int status = CGP_INTERNAL;
  for (int attempt = 0; attempt < 3; ++attempt) {
    uint8_t* grown = realloc(reply, capacity);
    if (!grown) {
      status = CGP_OUT_OF_MEMORY;
      break;
    }
    reply = grown;
    status = cgp_device_handle(device, bytes, (size_t)request_len, reply, capacity, &reply_len);
    if (status != CGP_BUFFER_TOO_SMALL) break;
    capacity = reply_len;
  }
  free(bytes);
  jbyteArray out = NULL;
  if (status == CGP_OK) {
    out = (*env)->NewByteArray(env, (jsize)reply_len);
    if (out) (*env)->SetByteArrayRegion(env, out, 0, (jsize)reply_len, (const jbyte*)reply);
  } else if (status == CGP_OUT_OF_MEMORY) {
    throw_status(env, status, "out of memory");
  } else {
    throw_device_status(env, device, status);
  }
  free(reply);
  return out;
}

JNIEXPORT jdouble JNICALL Java_org_cgpkit_Device_nativeRemaining(JNIEnv* env, jclass cls,
                                                                 jlong handle) {
  (void)cls;
  double remaining = 0;
  int status = cgp_device_remaining(device_of(handle), &remaining);
  if (status != CGP_OK) throw_device_status(env, device_of(handle), status);
  return remaining;
}

JNIEXPORT void JNICALL Java_org_cgpkit_Device_nativeClose(JNIEnv* env, jclass cls, jlong handle) {
  (void)env;
  (void)cls;
  cgp_device_close(device_of(handle));
}

JNIEXPORT jstring JNICALL Java_org_cgpkit_Device_version(JNIEnv* env, jclass cls) {
  (void)cls;
  return (*env)->NewStringUTF(env, cgp_version_string());
}
