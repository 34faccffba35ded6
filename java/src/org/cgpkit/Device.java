package org.cgpkit;

import java.nio.charset.StandardCharsets;

/**
 * One user's device (cgp/cgp.h through JNI; the same code an Android app loads): it keeps the
 * user's components and privacy filter and answers a coordinator's serialized
 * cgp.v1.DeviceRequest with a serialized cgp.v1.DeviceReply, adding noise on the device and
 * charging the filter before the reply exists. A replayed request gets identical bytes and no
 * new charge.
 *
 * <p>Thread safety: every method is synchronized on the device (so that close cannot race a
 * call, and each call's error message stays with it); different devices run in parallel.
 * Lifetime: {@link #close} releases the native device (its ledger file stays); a closed device
 * throws IllegalStateException. Close it (try-with-resources): there is deliberately no
 * Cleaner (java.lang.ref.Cleaner needs Android API 33), and a device left open holds its
 * ledger file until the process ends. Loads the native library "cgpkit_jni"
 * (libcgpkit_jni.so) once.
 */
public final class Device implements AutoCloseable {
  static {
    System.loadLibrary("cgpkit_jni");
  }

  private long handle;

  private Device(long handle) {
    this.handle = handle;
  }

  /**
   * Opens a device with a CGP filter of {@code budget} (in rho) whose ledger is the SQLite
   * file {@code ledgerPath} (created if absent; held by this device alone — another open of
   * the same file, in this process or another, fails with "ledger_in_use"), or {@code null}
   * for a ledger in memory that starts over with the process (tests and demos only). With
   * {@code stickyHalt}, once a request is refused for budget every later one is refused too.
   */
  public static Device openCgp(String ledgerPath, double budget, boolean stickyHalt)
      throws CgpException {
    return new Device(nativeOpenCgp(utf8(ledgerPath), budget, stickyHalt));
  }

  /** Sets a component (registered on first use with this dimension), e.g. "location". */
  public synchronized void setComponent(String id, double[] values) throws CgpException {
    if (id == null || values == null) throw new NullPointerException("id and values");
    nativeSetComponent(live(), utf8(id), values);
  }

  /** Projections of a location frame (cgp.v1.Projection numbers). */
  public static final int PROJECTION_LOCAL_EQUIDISTANT = 1;
  public static final int PROJECTION_SPHERICAL_MERCATOR = 2;

  /**
   * Keeps the coordinator's location frame, as its Welcome announces it (Welcome.frame), so
   * that {@link #setLocationLonLat} can project GPS positions on the device. Only local frames
   * are taken: a Mercator frame is refused (error naming "frame.projection") wherever the user
   * is.
   */
  public synchronized void setLocationFrame(int projection, double originLon, double originLat)
      throws CgpException {
    nativeSetLocationFrame(live(), projection, originLon, originLat);
  }

  /**
   * Sets a 2-D component to the GPS position (degrees) projected in the frame of
   * {@link #setLocationFrame}: exactly within 1,500 km of its origin, clamped towards it beyond
   * (never refused; Lipschitz in ground metres with constant at most 1.0094). A request stamped
   * with another frame is rejected by name.
   */
  public synchronized void setLocationLonLat(String id, double lon, double lat)
      throws CgpException {
    if (id == null) throw new NullPointerException("id");
    nativeSetLocationLonLat(live(), utf8(id), lon, lat);
  }

  /** Answers one serialized cgp.v1.DeviceRequest with a serialized cgp.v1.DeviceReply. */
  public synchronized byte[] handle(byte[] request) throws CgpException {
    if (request == null) throw new NullPointerException("request");
    return nativeHandle(live(), request);
  }

  /** The budget left, in rho units. */
  public synchronized double remaining() throws CgpException {
    return nativeRemaining(live());
  }

  @Override
  public synchronized void close() {
    if (handle != 0) {
      nativeClose(handle);
      handle = 0;
    }
  }

  /** The native library's version, "MAJOR.MINOR.PATCH". */
  public static native String version();

  private long live() {
    if (handle == 0) throw new IllegalStateException("the device is closed");
    return handle;
  }

  // UTF-8 bytes with a terminating NUL, as the C ABI takes strings (JNI's own strings are
  // "modified UTF-8", which differs for characters outside the BMP).
  private static byte[] utf8(String s) {
    if (s == null) return null;
    byte[] text = s.getBytes(StandardCharsets.UTF_8);
    byte[] terminated = new byte[text.length + 1];
    System.arraycopy(text, 0, terminated, 0, text.length);
    return terminated;
  }

  private static native long nativeOpenCgp(byte[] ledgerPath, double budget, boolean stickyHalt)
      throws CgpException;

  private static native void nativeSetComponent(long handle, byte[] id, double[] values)
      throws CgpException;

  private static native void nativeSetLocationFrame(long handle, int projection, double lon,
      double lat) throws CgpException;

  private static native void nativeSetLocationLonLat(long handle, byte[] id, double lon,
      double lat) throws CgpException;

  private static native byte[] nativeHandle(long handle, byte[] request) throws CgpException;

  private static native double nativeRemaining(long handle) throws CgpException;

  private static native void nativeClose(long handle);
}
