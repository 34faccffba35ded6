#!/usr/bin/python3
"""The console page in a real browser (Debian's headless Chromium, driven by Selenium).

A coordinator (cgp-coordinator serve --console) with a swarm of devices (cgp-device-swarm) and
one more device in a swarm of its own that is stopped (SIGSTOP) once connected: its connection
stays open and silent, so that every round waits for its deadline and a query runs long enough
to watch. The test signs in on the page, draws a box on the map, runs a range query
and checks that the number on the page is the API's number for that query id, watches the fleet
panel update while a query runs, renders a heat map (top regions over a grid), saves a
screenshot and checks its pixels are not uniform, and fails on any error in the browser's
console. Exits 77 (skipped, with the reason printed) where Chromium, ChromeDriver or Selenium is
missing.

  console_page.py --coordinator BIN --swarm BIN --assets DIR --out DIR
"""
import argparse
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib

SKIP = 77
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def skip(reason):
    print(f"SKIPPED: {reason}", flush=True)
    sys.exit(SKIP)


try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:
    skip("python3-selenium is not installed (scripts/setup.sh installs it)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def png_pixels(data):
    """Decodes an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium's screenshots are)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, "unexpected PNG format"
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return [tuple(row[x * channels:x * channels + 3]) for row in rows for x in range(width)]


class Fleet:
    """A coordinator with its console and a swarm of devices, in a scratch folder."""

    def __init__(self, coordinator, swarm, assets, devices=200, silent=True, extra=()):
        self.dir = tempfile.mkdtemp(prefix="cgp-console-browser-")
        self.processes = []
        self.silent = None
        run = lambda *a: subprocess.run([coordinator, *a], check=True, capture_output=True)
        run("credential", "--out", f"{self.dir}/analyst.key")
        self.credential = open(f"{self.dir}/analyst.key").read().strip()
        run("enrol", "--devices", f"{self.dir}/devices.csv", "--count", str(devices + int(silent)),
            "--secrets-out", f"{self.dir}/secrets.csv")
        self.port, self.console = free_port(), free_port()
        self.processes.append(subprocess.Popen(
            [coordinator, "serve", "--listen", f"127.0.0.1:{self.port}",
             "--devices", f"{self.dir}/devices.csv",
             "--analyst-credential", f"{self.dir}/analyst.key", "--budget", "1",
             "--state", f"{self.dir}/state.db", "--deadline-ms", "4000",
             "--console", f"127.0.0.1:{self.console}", "--console-assets", assets, *extra],
            stderr=open(f"{self.dir}/coordinator.log", "w")))
        self.wait_for(lambda: self.api("GET", "/api/v1/status"), "the console")
        self.processes.append(subprocess.Popen(
            [swarm, "--coordinator", f"127.0.0.1:{self.port}", "--count", str(devices),
             "--secrets", f"{self.dir}/secrets.csv", "--budget", "1", "--seed", "7"],
            stdout=subprocess.DEVNULL, stderr=open(f"{self.dir}/swarm.log", "w")))
        self.wait_for(lambda: int(self.api("GET", "/api/v1/status")["connected"]) == devices,
                      f"{devices} devices")
        self.devices = devices
        if not silent:
            return
        # The silent one: connected, then stopped.
        self.silent = subprocess.Popen(
            [swarm, "--coordinator", f"127.0.0.1:{self.port}", "--count", "1", "--offset",
             str(devices), "--secrets", f"{self.dir}/secrets.csv", "--budget", "1", "--seed", "7"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.processes.append(self.silent)
        self.wait_for(lambda: int(self.api("GET", "/api/v1/status")["connected"]) == devices + 1,
                      "the silent device")
        self.silent.send_signal(signal.SIGSTOP)
        self.devices = devices + 1

    def wait_for(self, ready, what, seconds=60):
        end = time.time() + seconds
        while time.time() < end:
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"FAILED: {what} not ready within {seconds} s; logs in {self.dir}")

    def api(self, method, path, body=None):
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.console}{path}", method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.credential}",
                     "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def close(self):
        if self.silent is not None:
            self.silent.send_signal(signal.SIGCONT)
        for p in reversed(self.processes):
            p.send_signal(signal.SIGTERM)
        for p in reversed(self.processes):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def solid_png(size=256, rgb=(120, 170, 200)):
    """A size × size PNG of one colour: a tile for the tile server below."""
    row = b"\x00" + bytes(rgb) * size
    chunk = lambda kind, body: struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(row * size)) + chunk(b"IEND", b""))


class TileServer:
    """A tile server on loopback that answers every /{z}/{x}/{y}.png with one tile, counting."""

    def __init__(self):
        import http.server
        import threading
        tile, served = solid_png(), []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                served.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(tile)))
                self.end_headers()
                self.wfile.write(tile)

            def log_message(self, *args):
                pass

        self.served = served
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def browser(profile):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--window-size=1400,1000", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def check(condition, message):
    if not condition:
        raise SystemExit(f"FAILED: {message}")
    print(f"ok: {message}", flush=True)


def sign_in(driver, wait, fleet):
    driver.get(f"http://127.0.0.1:{fleet.console}/")
    wait.until(EC.visibility_of_element_located((By.ID, "credential")))
    driver.find_element(By.ID, "credential").send_keys(fleet.credential)
    driver.find_element(By.CSS_SELECTOR, "#sign-in-form button").click()
    wait.until(EC.visibility_of_element_located((By.ID, "map")))
    try:
        wait.until(EC.text_to_be_present_in_element(
            (By.ID, "fleet-summary"), f"{fleet.devices} of {fleet.devices} devices connected"))
    except Exception:
        raise SystemExit(f"FAILED: the fleet panel did not show {fleet.devices} devices: "
                         f"{driver.find_element(By.ID, 'fleet-summary').text!r}; browser console: "
                         f"{driver.get_log('browser')}")


def type_box(driver, x0, y0, x1, y1):
    for field, value in (("box-x0", x0), ("box-y0", y0), ("box-x1", x1), ("box-y1", y1)):
        element = driver.find_element(By.ID, field)
        element.clear()
        element.send_keys(str(value))


def check_tiles(a):
    """With --frame and --console-tiles: the map is the tile server's, around the frame's origin,
    and a query drawn on it is still asked in metres."""
    tiles = TileServer()
    url = f"http://127.0.0.1:{tiles.port}/{{z}}/{{x}}/{{y}}.png"
    fleet = Fleet(a.coordinator, a.swarm, a.assets, devices=20, silent=False,
                  extra=("--frame", "local:-73.97,40.75", "--console-tiles", url))
    profile = tempfile.mkdtemp(prefix="cgp-chromium-")
    driver = None
    try:
        driver = browser(profile)
        wait = WebDriverWait(driver, 60)
        sign_in(driver, wait, fleet)
        wait.until(lambda d: len(tiles.served) > 0)
        check(all(p.endswith(".png") for p in tiles.served), f"tiles came from the tile server ({len(tiles.served)} asked)")
        check(len(driver.find_elements(By.CSS_SELECTOR, "#map img.leaflet-tile")) > 0, "tiles are on the map")
        type_box(driver, 0, 0, 20000, 20000)
        driver.find_element(By.ID, "run").click()
        wait.until(lambda d: d.find_element(By.ID, "result-estimate").text not in ("running…", "–"))
        query_id = driver.find_element(By.ID, "result-id").text
        shown = float(driver.find_element(By.ID, "result-estimate").get_attribute("data-value"))
        stored = fleet.api("GET", f"/api/v1/queries/{query_id}")
        check(shown == stored["estimate"], f"over tiles, the page shows the API's estimate: {shown}")
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        check(not errors, f"no error in the browser's console over tiles {errors if errors else ''}")
    finally:
        if driver is not None:
            driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
        fleet.close()
        tiles.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--swarm", required=True)
    parser.add_argument("--assets", required=True)
    parser.add_argument("--out", required=True)
    a = parser.parse_args()
    for path, what in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            skip(f"{path} is missing (Debian's {what}; scripts/setup.sh installs it)")
    if not os.path.isfile(os.path.join(a.assets, "vendor", "leaflet", "leaflet.js")):
        skip(f"the console page was not built into {a.assets} (npm missing at configure time?)")
    os.makedirs(a.out, exist_ok=True)

    fleet = Fleet(a.coordinator, a.swarm, a.assets)
    profile = tempfile.mkdtemp(prefix="cgp-chromium-")
    driver = None
    try:
        driver = browser(profile)
        wait = WebDriverWait(driver, 60)
        sign_in(driver, wait, fleet)
        check(True, "signed in; the fleet panel shows the connected devices")

        # Draw a box with two clicks on the map (the view is ±6 km around the frame's origin).
        area = driver.find_element(By.ID, "map")
        w, h = area.size["width"], area.size["height"]
        # Offsets from the map's centre (the frame's origin): a corner near it, one up and right.
        ActionChains(driver).move_to_element_with_offset(area, 5, -5).click() \
            .move_to_element_with_offset(area, w // 2 - 10, -h // 2 + 10).click().perform()
        x0, y0, x1, y1 = (float(driver.find_element(By.ID, i).get_attribute("value"))
                          for i in ("box-x0", "box-y0", "box-x1", "box-y1"))
        check(x0 < x1 and y0 < y1 and x1 > 0 and y1 > 0, f"a box drawn on the map: [{x0}, {x1}] × [{y0}, {y1}]")
        check(len(driver.find_elements(By.CSS_SELECTOR, "#map path.leaflet-interactive")) >= 1,
              "the drawn box is on the map")

        # A range query: the number on the page is the API's number for that query.
        driver.find_element(By.ID, "run").click()
        # While it runs (each round waits for the silent device), the fleet panel moves on.
        try:
            wait.until(EC.text_to_be_present_in_element((By.ID, "fleet-counts"), "a query is running"))
        except Exception:
            raise SystemExit("FAILED: no query running; page error: " +
                             driver.find_element(By.ID, "error").text)
        live_views = set()
        end = time.time() + 60
        while time.time() < end and driver.find_element(By.ID, "result-estimate").text == "running…":
            text = driver.find_element(By.ID, "fleet-live").text
            if "waiting for the rest" in text:
                live_views.add(text)
            time.sleep(0.25)
        check(len(live_views) >= 2, f"the fleet panel updated while the query ran: {sorted(live_views)} "
              f"(answer: {driver.find_element(By.ID, 'result-estimate').text!r}, "
              f"error: {driver.find_element(By.ID, 'error').text!r})")
        wait.until(lambda d: d.find_element(By.ID, "result-estimate").text not in ("running…", "–"))
        query_id = driver.find_element(By.ID, "result-id").text
        shown = float(driver.find_element(By.ID, "result-estimate").get_attribute("data-value"))
        stored = fleet.api("GET", f"/api/v1/queries/{query_id}")
        check(shown == stored["estimate"], f"the page shows the API's estimate for {query_id}: {shown}")
        check(stored["kind"] == "range" and stored["rounds_used"] == 4, "a 4-round range query ran")

        # A heat map: counts on a 10 × 10 grid over the city (top regions), top cells outlined.
        type_box(driver, 0, 0, 20000, 20000)
        Select(driver.find_element(By.ID, "kind")).select_by_value("heatmap")
        cells = driver.find_element(By.ID, "cells")
        cells.clear()
        cells.send_keys("10")
        rho = driver.find_element(By.ID, "rho")
        rho.clear()
        rho.send_keys("0.01")
        driver.find_element(By.ID, "run").click()
        try:
            wait.until(lambda d: "cells, busiest" in d.find_element(By.ID, "result-estimate").text)
        except Exception:
            raise SystemExit("FAILED: no heat map; page error: " + driver.find_element(By.ID, "error").text)
        fills = {p.get_attribute("fill") for p in driver.find_elements(By.CSS_SELECTOR, "#map path.leaflet-interactive")}
        check(len(fills) >= 3, f"the heat map's cells have {len(fills)} colours")
        driver.execute_script("window.scrollTo(0, 0)")
        shot = driver.find_element(By.ID, "map").screenshot_as_png
        with open(os.path.join(a.out, "console-heatmap.png"), "wb") as f:
            f.write(shot)
        driver.save_screenshot(os.path.join(a.out, "console.png"))
        pixels = png_pixels(shot)
        distinct = len(set(pixels))
        check(distinct >= 10, f"the heat map screenshot is not uniform ({distinct} colours, saved in {a.out})")

        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        check(not errors, f"no error in the browser's console {errors if errors else ''}")
    finally:
        if driver is not None:
            driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
        fleet.close()
    check_tiles(a)
    print("console page: every check passed")


if __name__ == "__main__":
    main()
