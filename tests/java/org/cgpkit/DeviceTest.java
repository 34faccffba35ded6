package org.cgpkit;

import cgp.v1.Cgp.DeviceReply;
import cgp.v1.Cgp.DeviceRequest;
import cgp.v1.Cgp.DistanceToPoint;
import cgp.v1.Cgp.ErrorCode;
import cgp.v1.Cgp.LocationFrame;
import cgp.v1.Cgp.LocationStatistic;
import cgp.v1.Cgp.Projection;
import cgp.v1.Cgp.ReplyStatus;
import cgp.v1.Cgp.RequestId;
import java.io.File;
import java.nio.file.Files;
import java.util.Arrays;

/**
 * The JNI binding from Java as an app uses it: requests and replies with protobuf-java's
 * generated cgp.v1 classes, named errors as CgpException, a ledger file that survives and is
 * held by one device, replays charged once, a device shared between threads. Prints
 * "N passed, M failed" and exits non-zero on any failure.
 */
public final class DeviceTest {
  private static int passed = 0, failed = 0;

  private static void check(boolean condition, String what) {
    if (condition) {
      ++passed;
    } else {
      ++failed;
      System.err.println("CHECK failed: " + what);
    }
  }

  private static byte[] location(String query, int round, double rho) {
    return DeviceRequest.newBuilder()
        .setId(RequestId.newBuilder().setQueryId(query).setRound(round))
        .setComponentId("location")
        .setLocation(LocationStatistic.getDefaultInstance())
        .setRho(rho)
        .build()
        .toByteArray();
  }

  private static CgpException thrown(ThrowingRunnable body) {
    try {
      body.run();
    } catch (CgpException e) {
      return e;
    } catch (Exception e) {
      throw new AssertionError("expected CgpException, got " + e, e);
    }
    return null;
  }

  private interface ThrowingRunnable {
    void run() throws Exception;
  }

  public static void main(String[] args) throws Exception {
    check(Device.version().matches("\\d+\\.\\d+\\.\\d+"), "version " + Device.version());

    CgpException bad = thrown(() -> Device.openCgp(null, -1, false));
    check(bad != null && bad.codeName().equals("not_positive") && bad.code() == 2,
        "a negative budget is not_positive");
    check(bad != null && bad.getMessage().contains("budget"), "the message names the budget");

    try (Device device = Device.openCgp(null, 1.0, false)) {
      device.setComponent("location", new double[] {3, 4});
      CgpException nan = thrown(() -> device.setComponent("location", new double[] {Double.NaN, 0}));
      check(nan != null && nan.codeName().equals("not_finite"), "NaN is not_finite");
      CgpException dim = thrown(() -> device.setComponent("location", new double[] {1, 2, 3}));
      check(dim != null && dim.codeName().equals("dimension_mismatch"), "dimension fixed");

      byte[] request = location("q", 1, 0.1);
      byte[] first = device.handle(request);
      DeviceReply reply = DeviceReply.parseFrom(first);
      check(reply.getStatus() == ReplyStatus.ANSWERED, "answered");
      check(reply.getValuesCount() == 2, "two values");
      check(Math.abs(reply.getValues(0) - 3) < 20, "noise of sigma 2.2 around x = 3");
      double after = device.remaining();
      check(after < 1.0 - 0.1 && after > 1.0 - 0.101, "charged about 0.1: " + after);
      check(Arrays.equals(device.handle(request), first), "a replay gets identical bytes");
      check(device.remaining() == after, "and no new charge");

      DeviceReply greedy = DeviceReply.parseFrom(device.handle(location("q", 2, 5.0)));
      check(greedy.getStatus() == ReplyStatus.REFUSED_BUDGET, "over budget is refused");
      check(device.remaining() == after, "a refusal charges nothing");

      byte[] distance = DeviceRequest.newBuilder()
          .setId(RequestId.newBuilder().setQueryId("d").setRound(1))
          .setComponentId("location")
          .setDistanceToPoint(DistanceToPoint.newBuilder().addPoint(0).addPoint(0))
          .setRho(0.05)
          .build()
          .toByteArray();
      check(DeviceReply.parseFrom(device.handle(distance)).getValuesCount() == 1, "distance");

      DeviceReply garbage = DeviceReply.parseFrom(device.handle(new byte[] {(byte) 0xff, 1, 2}));
      check(garbage.getStatus() == ReplyStatus.REJECTED_INVALID, "garbage is rejected");
      check(garbage.getError() == ErrorCode.MALFORMED_MESSAGE, "as malformed_message");

      // One device shared by threads: the binding serializes them; the total stays exact.
      double before = device.remaining();
      Thread[] threads = new Thread[4];
      for (int t = 0; t < threads.length; ++t) {
        final int id = t;
        threads[t] = new Thread(() -> {
          try {
            for (int r = 1; r <= 5; ++r) device.handle(location("thread" + id, r, 0.01));
          } catch (CgpException e) {
            throw new RuntimeException(e);
          }
        });
        threads[t].start();
      }
      for (Thread thread : threads) thread.join();
      double spentByThreads = before - device.remaining();
      check(spentByThreads > 20 * 0.01 && spentByThreads < 20 * 0.0101,
          "20 releases of 0.01 from 4 threads: " + spentByThreads);
    }

    // GPS lon/lat projected on the device in the coordinator's frame; another frame refused.
    try (Device phone = Device.openCgp(null, 1e7, false)) {
      CgpException early = thrown(() -> phone.setLocationLonLat("location", -73.96, 40.76));
      check(early != null && early.getMessage().contains("frame"), "no frame yet");
      phone.setLocationFrame(Device.PROJECTION_LOCAL_EQUIDISTANT, -73.97, 40.75);
      phone.setLocationLonLat("location", -73.97, 40.75);  // the origin: (0, 0) metres
      byte[] framed = DeviceRequest.newBuilder()
          .setId(RequestId.newBuilder().setQueryId("f").setRound(1))
          .setComponentId("location")
          .setLocation(LocationStatistic.getDefaultInstance())
          .setRho(1e6)
          .setFrame(LocationFrame.newBuilder()
                        .setProjection(Projection.PROJECTION_LOCAL_EQUIDISTANT)
                        .setOriginLon(-73.97)
                        .setOriginLat(40.75))
          .build()
          .toByteArray();
      DeviceReply here = DeviceReply.parseFrom(phone.handle(framed));
      check(here.getStatus() == ReplyStatus.ANSWERED && Math.abs(here.getValues(0)) < 0.05
              && Math.abs(here.getValues(1)) < 0.05,
          "projected at the origin");
      byte[] elsewhere = DeviceRequest.parseFrom(framed).toBuilder()
          .setId(RequestId.newBuilder().setQueryId("g").setRound(1))
          .setFrame(LocationFrame.newBuilder()
                        .setProjection(Projection.PROJECTION_LOCAL_EQUIDISTANT)
                        .setOriginLon(-73.95)
                        .setOriginLat(40.65))
          .build()
          .toByteArray();
      DeviceReply refused = DeviceReply.parseFrom(phone.handle(elsewhere));
      check(refused.getStatus() == ReplyStatus.REJECTED_INVALID
              && refused.getErrorMessage().contains("frame"),
          "another frame is refused by name");
    }

    // An error quoting characters outside the BMP crosses JNI intact (UTF-8, not modified).
    try (Device device = Device.openCgp(null, 1.0, false)) {
      String id = "place-\ud83d\udccd";
      device.setComponent(id, new double[] {1, 2});
      CgpException dim = thrown(() -> device.setComponent(id, new double[] {1}));
      check(dim != null && dim.getMessage().contains(id), "a non-BMP id in the message");
    }

    File dir = Files.createTempDirectory("cgpkit-jni").toFile();
    String ledger = new File(dir, "ledger \u00e9\u6f22.db").getPath();  // UTF-8 path
    double remaining;
    try (Device device = Device.openCgp(ledger, 0.5, false)) {
      device.setComponent("location", new double[] {1, 2});
      device.handle(location("p", 1, 0.2));
      remaining = device.remaining();
      CgpException held = thrown(() -> Device.openCgp(ledger, 0.5, false));
      check(held != null && held.codeName().equals("ledger_in_use"), "one device per ledger");
    }
    try (Device reopened = Device.openCgp(ledger, 0.5, false)) {
      check(reopened.remaining() == remaining, "the budget survives a restart");
      reopened.close();
      boolean closed = false;
      try {
        reopened.remaining();
      } catch (IllegalStateException e) {
        closed = true;
      }
      check(closed, "a closed device throws");
    }
    for (File f : dir.listFiles()) f.delete();
    dir.delete();

    System.out.println(passed + " passed, " + failed + " failed");
    System.exit(failed == 0 ? 0 : 1);
  }
}
