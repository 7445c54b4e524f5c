package sluice;

/** A failed sluice call: the C API's sluice_status code and its message. */
public final class SluiceException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private static final String[] NAMES = {
    "OK", "INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "OUT_OF_RANGE",
    "RESOURCE_EXHAUSTED", "UNAVAILABLE", "UNSUPPORTED", "INTERNAL", "VERSION"
  };
  private final int code;

  SluiceException(int code, String message) {
    super(name(code) + ": " + message);
    this.code = code;
  }

  /** The sluice_status value (SLUICE_ERROR_NOT_FOUND = 2, ...). */
  public int code() {
    return code;
  }

  /** "NOT_FOUND", "INVALID_ARGUMENT", ... */
  public String status() {
    return name(code);
  }

  static String name(int code) {
    return code >= 0 && code < NAMES.length ? NAMES[code] : "UNKNOWN";
  }
}
