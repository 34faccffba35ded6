// The cgpkit console page: the coordinator's HTTP API (docs/console.md) on a map in the data's
// own frame (metres; Leaflet's CRS.Simple, lat = y, lng = x). No framework: the DOM and fetch.
"use strict";

const api = {
  csrf: sessionStorage.getItem("cgp-csrf") || "",
  async call(method, path, body) {
    const headers = {};
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (method !== "GET") headers["X-CSRF-Token"] = api.csrf;
    const response = await fetch(path, {
      method, headers, credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const data = await response.json().catch(() => ({}));
    if (!response.ok) {
      const error = new Error((data.error && data.error.message) || `HTTP ${response.status}`);
      error.status = response.status;
      error.data = data;
      throw error;
    }
    return data;
  },
};

const $ = (id) => document.getElementById(id);
const number = (id) => Number($(id).value);
function showError(message) { $("error").textContent = message || ""; }
function fmt(x, digits = 4) {
  if (typeof x === "string") x = Number(x);
  if (!Number.isFinite(x)) return String(x);
  return Math.abs(x) >= 1e4 || (Math.abs(x) < 1e-3 && x !== 0) ? x.toExponential(3) : x.toFixed(digits).replace(/\.?0+$/, "");
}

// ---- sign-in ------------------------------------------------------------------------------
async function signIn(event) {
  event.preventDefault();
  showError("");
  try {
    const opened = await api.call("POST", "api/v1/session", { credential: $("credential").value });
    api.csrf = opened.csrf_token;
    sessionStorage.setItem("cgp-csrf", api.csrf);
    $("credential").value = "";
    await enter();
  } catch (error) { showError(error.message); }
}

async function signOut() {
  try { await api.call("DELETE", "api/v1/session"); } catch (error) { /* signed out anyway */ }
  sessionStorage.removeItem("cgp-csrf");
  api.csrf = "";
  location.reload();
}

// ---- the map and the drawn region ---------------------------------------------------------
let map, shapeLayer, heatLayer, clicks = [];

// The map's frame: the data's metres (x, y) ↔ the map's LatLng. Offline, the map is the
// metres themselves (Leaflet's CRS.Simple, lat = y, lng = x). With a tile server, the map is
// the web's and the metres are the devices' local frame around its origin: an azimuthal
// equidistant projection, here on the sphere of the ellipsoid's Gaussian radius at the origin
// (within a few metres of the devices' WGS 84 one at city scale: the background only — queries
// are always sent in metres).
let frame = { toLatLng: (x, y) => L.latLng(y, x), toXY: (ll) => [ll.lng, ll.lat] };
function localFrame(lon0, lat0) {
  const a = 6378137, f = 1 / 298.257223563, e2 = f * (2 - f), rad = Math.PI / 180;
  const p0 = lat0 * rad, l0 = lon0 * rad;
  const R = a * Math.sqrt(1 - e2) / (1 - e2 * Math.sin(p0) ** 2);
  return {
    toLatLng(x, y) {
      const rho = Math.hypot(x, y);
      if (rho === 0) return L.latLng(lat0, lon0);
      const c = rho / R;
      const phi = Math.asin(Math.cos(c) * Math.sin(p0) + (y * Math.sin(c) * Math.cos(p0)) / rho);
      const lam = l0 + Math.atan2(x * Math.sin(c), rho * Math.cos(p0) * Math.cos(c) - y * Math.sin(p0) * Math.sin(c));
      return L.latLng(phi / rad, lam / rad);
    },
    toXY(ll) {
      const phi = ll.lat * rad, dl = ll.lng * rad - l0;
      const cosC = Math.sin(p0) * Math.sin(phi) + Math.cos(p0) * Math.cos(phi) * Math.cos(dl);
      const c = Math.acos(Math.min(1, Math.max(-1, cosC)));
      const k = c === 0 ? 1 : c / Math.sin(c);
      return [R * k * Math.cos(phi) * Math.sin(dl), R * k * (Math.cos(p0) * Math.sin(phi) - Math.sin(p0) * Math.cos(phi) * Math.cos(dl))];
    },
  };
}
const toLatLng = (x, y) => frame.toLatLng(x, y);
// A box in metres as the map's polygon (a box in metres is no box in latitude and longitude).
const boxLatLngs = (x0, y0, x1, y1) => [toLatLng(x0, y0), toLatLng(x1, y0), toLatLng(x1, y1), toLatLng(x0, y1)];

function setupMap(config) {
  const tiles = config && config.tiles && config.frame && config.frame.projection === "local";
  if (tiles) {
    frame = localFrame(config.frame.origin_lon, config.frame.origin_lat);
    // Our own attribution control, without Leaflet's prefix (its inline SVG flag has a style
    // attribute the page's Content-Security-Policy refuses).
    map = L.map("map", { zoomSnap: 0.25, maxZoom: 19, attributionControl: false });
    L.control.attribution({ prefix: false }).addTo(map);
    L.tileLayer(config.tiles, { maxZoom: 19, attribution: `tiles: ${new URL(config.tiles).host}` }).addTo(map);
  } else {
    map = L.map("map", { crs: L.CRS.Simple, minZoom: -10, maxZoom: 4, zoomSnap: 0.25, attributionControl: false });
  }
  map.fitBounds(L.latLngBounds(boxLatLngs(-6000, -6000, 6000, 6000)));
  // The offline base map: a 1 km graticule, and basemap.geojson (the deployment's own outlines
  // in the data's frame; empty by default).
  const grid = L.layerGroup().addTo(map);
  for (let v = -50000; v <= 50000; v += 1000) {
    const major = v % 10000 === 0;
    const options = { color: major ? "#8aa" : "#cdd", weight: major ? 1.2 : 0.6, interactive: false };
    L.polyline([toLatLng(v, -50000), toLatLng(v, 50000)], options).addTo(grid);
    L.polyline([toLatLng(-50000, v), toLatLng(50000, v)], options).addTo(grid);
  }
  fetch("basemap.geojson").then((r) => r.json()).then((geojson) => {
    const layer = L.geoJSON(geojson, {
      coordsToLatLng: (c) => toLatLng(c[0], c[1]),
      style: { color: "#456", weight: 1.5, fill: false },
    }).addTo(map);
    if (layer.getLayers().length > 0) map.fitBounds(layer.getBounds());
  }).catch(() => {});
  shapeLayer = L.layerGroup().addTo(map);
  heatLayer = L.layerGroup().addTo(map);
  map.on("click", onMapClick);
  map.on("dblclick", () => { if (shape() === "polygon") clicks = []; });
  map.doubleClickZoom.disable();
}

const shape = () => document.querySelector("input[name=shape]:checked").value;
const hints = {
  box: "Box: click two opposite corners on the map, or type them.",
  disc: "Disc: click the centre, then a point on the edge, or type them.",
  polygon: "Polygon: click its vertices (double-click ends it), or type them.",
};
function onShapeChange() {
  for (const s of ["box", "disc", "polygon"]) $(`${s}-inputs`).hidden = s !== shape();
  $("draw-hint").textContent = hints[shape()];
  clicks = [];
  drawRegion();
}

function onMapClick(event) {
  const [x, y] = frame.toXY(event.latlng);
  clicks.push([x, y]);
  const s = shape();
  if (s === "box" && clicks.length === 2) {
    const [[ax, ay], [bx, by]] = clicks;
    $("box-x0").value = Math.round(Math.min(ax, bx)); $("box-y0").value = Math.round(Math.min(ay, by));
    $("box-x1").value = Math.round(Math.max(ax, bx)); $("box-y1").value = Math.round(Math.max(ay, by));
    clicks = [];
  } else if (s === "disc" && clicks.length === 2) {
    const [[cx, cy], [ex, ey]] = clicks;
    $("disc-x").value = Math.round(cx); $("disc-y").value = Math.round(cy);
    $("disc-r").value = Math.round(Math.hypot(ex - cx, ey - cy));
    clicks = [];
  } else if (s === "polygon") {
    $("polygon-xy").value = clicks.map(([px, py]) => `${Math.round(px)} ${Math.round(py)}`).join("\n");
  }
  drawRegion();
}

function polygonVertices() {
  return $("polygon-xy").value.split("\n").map((line) => line.trim()).filter((line) => line)
    .map((line) => line.split(/[\s,]+/).map(Number));
}

// The region as cgp.v1.Region (JSON), and its centre (KDE and kNN are asked there).
function region() {
  const s = shape();
  if (s === "box") {
    return { box: { lo: [number("box-x0"), number("box-y0")], hi: [number("box-x1"), number("box-y1")] } };
  }
  if (s === "disc") return { ball: { center: [number("disc-x"), number("disc-y")], radius: number("disc-r") } };
  return { polygon: { outer: { xy: polygonVertices().flat() } } };
}
function centre() {
  const r = region();
  if (r.box) return [(r.box.lo[0] + r.box.hi[0]) / 2, (r.box.lo[1] + r.box.hi[1]) / 2];
  if (r.ball) return r.ball.center;
  const v = polygonVertices();
  return [v.reduce((a, p) => a + p[0], 0) / v.length, v.reduce((a, p) => a + p[1], 0) / v.length];
}

function drawRegion() {
  shapeLayer.clearLayers();
  const style = { color: "#d35400", weight: 2, fillOpacity: 0.08 };
  const r = region();
  if (r.box) {
    L.polygon(boxLatLngs(r.box.lo[0], r.box.lo[1], r.box.hi[0], r.box.hi[1]), style).addTo(shapeLayer);
  } else if (r.ball) {
    const [cx, cy] = r.ball.center, rr = r.ball.radius;
    const ring = Array.from({ length: 72 }, (_, i) => toLatLng(cx + rr * Math.cos(i * Math.PI / 36), cy + rr * Math.sin(i * Math.PI / 36)));
    L.polygon(ring, style).addTo(shapeLayer);
  } else {
    const v = polygonVertices().filter((p) => p.length === 2 && p.every(Number.isFinite));
    if (v.length >= 2) L.polygon(v.map((p) => toLatLng(p[0], p[1])), style).addTo(shapeLayer);
  }
}

// ---- queries ------------------------------------------------------------------------------
function options() {
  const budget = document.querySelector("input[name=budget]:checked").value;
  const out = { method: $("method").value, rounds: number("rounds") };
  if (budget === "adaptive") out.adaptive = true;
  else out.rho = number("rho");
  if (budget === "accuracy") out.rho = number("rho");
  return out;
}
function accuracy() {
  return document.querySelector("input[name=budget]:checked").value === "accuracy"
    ? { relative: number("relative") } : undefined;
}

// The region's bounding box in metres.
function boundingBox() {
  const r = region();
  if (r.box) return r.box;
  if (r.ball) {
    const [cx, cy] = r.ball.center, rr = r.ball.radius;
    return { lo: [cx - rr, cy - rr], hi: [cx + rr, cy + rr] };
  }
  const v = polygonVertices();
  return { lo: [Math.min(...v.map((p) => p[0])), Math.min(...v.map((p) => p[1]))], hi: [Math.max(...v.map((p) => p[0])), Math.max(...v.map((p) => p[1]))] };
}

function gridCells() {
  const box = boundingBox();
  const n = Math.max(2, Math.min(60, Math.round(number("cells"))));
  const w = (box.hi[0] - box.lo[0]) / n, h = (box.hi[1] - box.lo[1]) / n;
  const cells = [];
  for (let j = 0; j < n; ++j) {
    for (let i = 0; i < n; ++i) {
      cells.push({ box: { lo: [box.lo[0] + i * w, box.lo[1] + j * h], hi: [box.lo[0] + (i + 1) * w, box.lo[1] + (j + 1) * h] } });
    }
  }
  return cells;
}

async function runQuery(event) {
  event.preventDefault();
  showError("");
  const kind = $("kind").value;
  let path, body;
  if (kind === "range") {
    path = "api/v1/queries/range";
    body = { options: options(), range: region(), accuracy: accuracy() };
  } else if (kind === "kde") {
    path = "api/v1/queries/kde";
    body = { options: options(), point: centre(), bandwidth: number("bandwidth"), accuracy: accuracy() };
  } else if (kind === "knn") {
    path = "api/v1/queries/knn";
    body = { options: options(), point: centre(), k: number("k") };
  } else {
    path = "api/v1/queries/top-regions";
    const cells = gridCells();
    const o = options();
    if (o.method === "PM1") o.method = "PM0";  // top regions take point releases
    delete o.rounds;  // a geometric schedule of at most `rounds` rounds instead
    body = { options: o, regions: cells, k: Math.min(number("top-k"), cells.length), schedule: { max_rounds: number("rounds") } };
  }
  if (body.accuracy === undefined) delete body.accuracy;
  $("run").disabled = true;
  $("result-estimate").textContent = "running…";
  try {
    const result = await api.call("POST", path, body);
    showResult(result, body);
  } catch (error) {
    showError(error.message);
    $("result-estimate").textContent = "–";
    if (error.data && error.data.result) showResult(error.data.result, body);
  } finally {
    $("run").disabled = false;
    refreshHistory();
  }
}

function showResult(r, request) {
  $("result-id").textContent = r.query_id;
  $("result-kind").textContent = `(${r.kind})`;
  $("result-estimate").textContent = r.kind === "knn" ? `${r.neighbours.length} neighbours` : fmt(r.estimate);
  $("result-estimate").dataset.value = String(r.estimate);
  const interval = r.kind === "top-regions"
    ? (r.certified ? "the busiest cells are certified (the race ended with k left)" : "the race did not separate the k busiest cells within its rounds")
    : r.certified !== undefined
    ? `certified interval [${fmt(r.lower)}, ${fmt(r.upper)}]${r.certified ? " — meets the target" : " — target not reached"}`
    : "";
  const missing = r.missing && Number(r.missing.users) > 0
    ? ` · users who did not answer could move it within [${fmt(r.missing.lower)}, ${fmt(r.missing.upper)}]` : "";
  $("result-interval").textContent = interval + missing;
  $("result-rounds").textContent = `${r.rounds_used} rounds · asked per round ${r.asked_per_round.join(", ")} · ${fmt(r.seconds, 2)} s`;
  const c = r.coverage || {};
  $("result-coverage").textContent = `answered ${c.answered} of ${c.users} users (refused ${c.refused}, rejected ${c.rejected}, unanswered ${c.unanswered})${c.valid ? "" : " — below the coverage asked for"}`;
  const list = $("result-neighbours");
  list.replaceChildren(...(r.neighbours || []).map((id) => Object.assign(document.createElement("li"), { textContent: id })));
  const s = r.spending;
  $("result-spending").textContent = `${s.users_charged} users charged, ${fmt(s.total_rho)} in all, at most ${fmt(s.max_rho)} each`;
  drawHistogram(s.bins);
  heatLayer.clearLayers();
  if (request && r.region_counts && r.region_counts.length > 0) drawHeatMap(r, request);
}

function drawHistogram(bins) {
  const svg = $("spending-chart");
  const ns = "http://www.w3.org/2000/svg";
  svg.replaceChildren();
  if (!bins.length) return;
  const most = Math.max(...bins.map((b) => b.users));
  const w = 320 / bins.length;
  bins.forEach((b, i) => {
    const h = most > 0 ? Math.max(1, 100 * b.users / most) : 0;
    const bar = document.createElementNS(ns, "rect");
    bar.setAttribute("x", String(i * w + 1)); bar.setAttribute("y", String(105 - h));
    bar.setAttribute("width", String(w - 2)); bar.setAttribute("height", String(h));
    bar.setAttribute("fill", "#2a7ab0");
    const tip = document.createElementNS(ns, "title");
    tip.textContent = `${b.users} users charged (${fmt(b.lower)}, ${fmt(b.upper)}]`;
    bar.appendChild(tip);
    svg.appendChild(bar);
  });
  const axis = document.createElementNS(ns, "text");
  axis.setAttribute("x", "0"); axis.setAttribute("y", "118"); axis.setAttribute("font-size", "10");
  axis.textContent = `0 … ${fmt(bins[bins.length - 1].upper)}`;
  svg.appendChild(axis);
}

// Viridis-like ramp for t in [0, 1].
function ramp(t) {
  const stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  const x = Math.min(Math.max(t, 0), 1) * (stops.length - 1), i = Math.min(Math.floor(x), stops.length - 2), f = x - i;
  const c = stops[i].map((v, k) => Math.round(v + f * (stops[i + 1][k] - v)));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

function drawHeatMap(r, request) {
  const counts = r.region_counts;
  const most = Math.max(1, ...counts.map((c) => c.estimate));
  const top = new Set(r.top_regions);
  for (const c of counts) {
    const cell = request.regions[c.region].box;
    L.polygon(boxLatLngs(cell.lo[0], cell.lo[1], cell.hi[0], cell.hi[1]), {
      stroke: top.has(c.region), color: "#ff2d2d", weight: 3,
      fillColor: ramp(Math.max(c.estimate, 0) / most), fillOpacity: 0.55,
    }).bindTooltip(`≈ ${fmt(c.estimate, 1)} users [${fmt(c.lower, 1)}, ${fmt(c.upper, 1)}]${top.has(c.region) ? " — among the busiest" : ""}`)
      .addTo(heatLayer);
  }
  $("result-estimate").textContent = `${counts.length} cells, busiest: ${[...top].join(", ")}`;
  if (heatLayer.getLayers().length > 0) map.fitBounds(L.featureGroup(heatLayer.getLayers()).getBounds());
}

// ---- fleet and history --------------------------------------------------------------------
async function refreshFleet() {
  try {
    const f = await api.call("GET", "api/v1/fleet");
    $("fleet-summary").textContent = `${f.connected} of ${f.enrolled} devices connected`;
    $("fleet-counts").textContent = `${f.queries} queries, ${f.rounds_total} rounds, ${f.requests} requests, ${f.replies} replies, ${f.unanswered} unanswered${f.query_running ? " · a query is running" : ""}`;
    const live = f.round_in_progress;
    $("fleet-live").textContent = live
      ? `round ${live.round} of ${live.query_id}: ${live.answered} of ${live.sent} asked devices answered, waiting for the rest (${fmt(live.milliseconds / 1000, 1)} s)`
      : "no round waiting for replies";
    const rows = f.rounds.slice(-12).reverse().map((r) => {
      const tr = document.createElement("tr");
      for (const v of [r.query_id, r.round, r.asked, r.answered, r.refused, r.rejected, r.unanswered, fmt(r.milliseconds, 0)]) {
        tr.appendChild(Object.assign(document.createElement("td"), { textContent: String(v) }));
      }
      return tr;
    });
    $("fleet-rounds").replaceChildren(...rows);
  } catch (error) {
    if (error.status === 401) location.reload();
  }
}

async function refreshHistory() {
  try {
    const { queries } = await api.call("GET", "api/v1/queries?limit=20");
    $("history").replaceChildren(...queries.map((q) => {
      const li = document.createElement("li");
      const open = Object.assign(document.createElement("button"), { type: "button", textContent: q.query_id });
      open.addEventListener("click", async () => {
        try { showResult(await api.call("GET", `api/v1/queries/${encodeURIComponent(q.query_id)}`), null); } catch (error) { showError(error.message); }
      });
      li.append(open, ` ${q.kind}: ${q.kind === "knn" ? "" : fmt(q.estimate)} (${q.users_charged} users charged)`);
      return li;
    }));
  } catch (error) { /* the fleet poll reports sign-outs */ }
}

async function enter() {
  $("sign-in-panel").hidden = true;
  $("workspace").hidden = false;
  $("sign-out").hidden = false;
  if (!map) setupMap(await api.call("GET", "api/v1/console").catch(() => null));
  map.invalidateSize();
  drawRegion();
  await refreshFleet();
  await refreshHistory();
  setInterval(refreshFleet, 1000);
}

function updateKind() {
  const kind = $("kind").value;
  for (const el of document.querySelectorAll(".kde-only")) el.hidden = kind !== "kde";
  for (const el of document.querySelectorAll(".knn-only")) el.hidden = kind !== "knn";
  for (const el of document.querySelectorAll(".heatmap-only")) el.hidden = kind !== "heatmap";
}

document.addEventListener("DOMContentLoaded", async () => {
  $("sign-in-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", signOut);
  $("query-form").addEventListener("submit", runQuery);
  $("kind").addEventListener("change", updateKind);
  for (const input of document.querySelectorAll("input[name=shape]")) input.addEventListener("change", onShapeChange);
  for (const id of ["box-x0", "box-y0", "box-x1", "box-y1", "disc-x", "disc-y", "disc-r", "polygon-xy"]) {
    $(id).addEventListener("input", () => { if (map) drawRegion(); });
  }
  updateKind();
  const session = await api.call("GET", "api/v1/session").catch(() => ({ signed_in: false }));
  if (session.signed_in && api.csrf) await enter();
  else $("sign-in-panel").hidden = false;
});
