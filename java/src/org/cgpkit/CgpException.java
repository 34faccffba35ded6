package org.cgpkit;

import java.nio.charset.StandardCharsets;

/**
 * A failed call of the device SDK: the cgp.h status code (e.g. 2, "not_positive"), its name,
 * and the message, which names the parameter ("budget must be finite and positive, got -1").
 * Nothing was charged when this is thrown.
 */
public final class CgpException extends Exception {
  private static final long serialVersionUID = 1L;
  private final int code;
  private final String codeName;

  public CgpException(int code, String codeName, String message) {
    super(message);
    this.code = code;
    this.codeName = codeName;
  }

  // From the JNI side: the status's name (ASCII) and the message as UTF-8 bytes.
  static CgpException fromNative(int code, String codeName, byte[] message) {
    return new CgpException(code, codeName, new String(message, StandardCharsets.UTF_8));
  }

  /** The cgp.h status (cgp.v1.ErrorCode numbers, 100 out of memory, 101 internal). */
  public int code() {
    return code;
  }

  /** The status's name, e.g. "ledger_in_use". */
  public String codeName() {
    return codeName;
  }
}
