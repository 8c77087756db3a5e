// Draws a FleetState on a Leaflet map. Vehicles are small DOM markers (rotated by bearing,
// tagged with data-testid and their position) that glide between GPS fixes; routes, nodes
// and requests go to one canvas layer, which stays fast with hundreds of them.
//
// Tiles come from the configured URL; when none loads (no network, or no tile URL) the map
// draws the streets of the simulator's bundled road network instead (OpenStreetMap data,
// ODbL, from /dashboard/networks/{name}.json), under the service area outline and the fleet.

import { vehicleColor } from "./format.js";
import { decodePolyline } from "./polyline.js";

const L = window.L;

// A transparent pixel for tiles that fail, instead of the browser's broken-image icon.
const EMPTY_TILE = "data:image/gif;base64,R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7";

const NODE_STYLE = {
  pickup: { assigned: ["#2563eb", 0.85], completed: ["#94a3b8", 0.35], no_show: ["#dc2626", 0.9],
    cancelled: ["#dc2626", 0.35] },
  dropoff: { assigned: ["#ea580c", 0.85], completed: ["#94a3b8", 0.35], no_show: ["#dc2626", 0.6],
    cancelled: ["#dc2626", 0.35] },
};
const REQUEST_STYLE = { requested: "#7c3aed", offered: "#7c3aed", no_offer: "#dc2626",
  cancelled: "#64748b" };

// Leaflet renders a string tooltip as HTML: event fields (node_type, status, ids) are free
// strings of whoever ingested the event, so a tooltip is always a text node, never markup.
const textContent = (text) => {
  const span = document.createElement("span");
  span.textContent = text;
  return span;
};

const escapeHtml = (text) => String(text).replace(/[&<>"']/g,
  (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

export class FleetMap {
  constructor(element, { tileUrl, tileAttribution, roads = "auto", assetPrefix = "/dashboard" }) {
    this.element = element;
    this.map = L.map(element, { preferCanvas: true, zoomControl: true, attributionControl: true })
      .setView([57.705, 11.963], 12);
    // The simulator's bundled road network is OpenStreetMap data (ODbL): always credited, the
    // tiles too when they are OpenStreetMap's, in one credit rather than two.
    const osmTiles = /openstreetmap/i.test(tileAttribution || "") && Boolean(tileUrl);
    this.map.attributionControl.addAttribution(
      '© <a href="https://www.openstreetmap.org/copyright">OpenStreetMap</a> contributors'
      + (osmTiles ? ": map tiles; road network (ODbL)" : ": road network (ODbL)"));
    this.roadsMode = roads;
    this.assetPrefix = assetPrefix;
    this.tilesLoaded = false;
    this.tilesFailed = !tileUrl; // no tiles at all counts as tiles that do not load
    if (tileUrl) {
      L.tileLayer(tileUrl, {
        maxZoom: 19,
        errorTileUrl: EMPTY_TILE,
        // Leaflet renders attribution as HTML; ours is plain text from the settings.
        attribution: osmTiles ? "" : escapeHtml(tileAttribution || ""),
        crossOrigin: true,
      // A failed tile is replaced by EMPTY_TILE, whose own load Leaflet reports as a tileload.
      }).on("tileload", (loaded) => {
        if (loaded.tile && loaded.tile.src === EMPTY_TILE) return;
        this.tilesLoaded = true;
        this.updateRoads();
      })
        .on("tileerror", () => { this.tilesFailed = true; this.updateRoads(); })
        .addTo(this.map);
    }
    // The streets go in a pane of their own, above the tiles and below everything else.
    this.map.createPane("roads").style.zIndex = 250;
    this.roadRenderer = L.canvas({ pane: "roads", padding: 0.5 });
    this.roadLayer = null;
    this.roadsWanted = null; // the network name the current simulation drives on
    this.networks = new Map(); // name -> Promise of the network's document (or null)
    this.element.dataset.roads = "none";
    L.control.scale({ imperial: false }).addTo(this.map);
    this.renderer = L.canvas({ padding: 0.3 });
    this.routeLayer = L.layerGroup().addTo(this.map);
    this.nodeLayer = L.layerGroup().addTo(this.map);
    this.vehicleLayer = L.layerGroup().addTo(this.map);
    this.area = null;
    this.markers = new Map(); // vehicle id -> {marker, element, from, to, t0, duration}
    this.routes = new Map(); // vehicle id -> polyline
    this.nodes = new Map(); // node key -> circle marker
    this.requests = new Map(); // booking id -> circle marker
    this.fitted = false;
    this.reducedMotion = window.matchMedia("(prefers-reduced-motion: reduce)").matches;
  }

  /**
   * Draw the streets of the road network the simulator's `settings` drive on, when tiles do
   * not load (or always, as configured). The network is the settings' `network`, or, when
   * unset, the bundled one whose bounds hold the area's centre (as the simulator picks it).
   */
  async showRoads(settings) {
    const chosen = settings && settings.network;
    const name = chosen || "gothenburg";
    if (name === "straight" || this.roadsMode === "never") {
      this.setRoadLayer(null, null);
      return;
    }
    if (!this.networks.has(name)) {
      this.networks.set(name, fetch(`${this.assetPrefix}/networks/${encodeURIComponent(name)}.json`)
        .then((answer) => (answer.ok ? answer.json() : null)).catch(() => null));
    }
    const doc = await this.networks.get(name);
    const area = settings && settings.area;
    const centre = area && (typeof area.lat === "number" ? [area.lat, area.lon]
      : [(area.min_lat + area.max_lat) / 2, (area.min_lon + area.max_lon) / 2]);
    const inside = !centre || !doc || !doc.bounds || (centre[0] >= doc.bounds[0]
      && centre[0] <= doc.bounds[2] && centre[1] >= doc.bounds[1] && centre[1] <= doc.bounds[3]);
    this.setRoadLayer(doc && (chosen || inside) ? name : null, doc);
  }

  setRoadLayer(name, doc) {
    if (this.roadsWanted === name && (this.roadLayer || !doc)) {
      this.updateRoads();
      return;
    }
    this.roadsWanted = name;
    if (this.roadLayer) this.roadLayer.remove();
    this.roadLayer = null;
    if (name && doc) {
      const lines = [];
      for (const street of doc.streets) {
        try {
          lines.push(decodePolyline(street));
        } catch {
          /* a damaged street is left out, not drawn across the map */
        }
      }
      this.roadLayer = L.polyline(lines, { renderer: this.roadRenderer, color: "#8796a8",
        weight: 1.3, opacity: 0.85, interactive: false });
      this.roadLayer.streetCount = lines.length;
    }
    this.updateRoads();
  }

  /** Show or hide the streets: always, never, or (auto) while no tile has loaded. */
  updateRoads() {
    const show = Boolean(this.roadLayer) && (this.roadsMode === "always"
      || (this.roadsMode === "auto" && this.tilesFailed && !this.tilesLoaded));
    if (show && !this.map.hasLayer(this.roadLayer)) this.roadLayer.addTo(this.map);
    if (!show && this.roadLayer && this.map.hasLayer(this.roadLayer)) this.roadLayer.remove();
    this.element.dataset.roads = show ? "shown" : (this.roadLayer ? "hidden" : "none");
    this.element.dataset.roadStreets = show ? String(this.roadLayer.streetCount) : "0";
  }

  /** Outline the simulator's service area ({lat,lon,radius_m} or a bounding box) and fit. */
  showArea(area) {
    const key = JSON.stringify(area || null);
    if (this.areaKey === key) return;
    this.areaKey = key;
    if (this.area) this.area.remove();
    this.area = null;
    if (!area) return;
    const style = { color: "#0f766e", weight: 1.5, dashArray: "6 6", fill: true,
      fillOpacity: 0.04, interactive: false, renderer: this.renderer };
    if (typeof area.radius_m === "number") {
      this.area = L.circle([area.lat, area.lon], { radius: area.radius_m, ...style });
    } else if (typeof area.min_lat === "number") {
      this.area = L.rectangle([[area.min_lat, area.min_lon], [area.max_lat, area.max_lon]], style);
    }
    if (this.area) {
      this.area.addTo(this.map);
      this.map.fitBounds(this.area.getBounds(), { padding: [20, 20] });
      this.fitted = true;
    }
  }

  reset() {
    this.routeLayer.clearLayers();
    this.nodeLayer.clearLayers();
    this.vehicleLayer.clearLayers();
    this.markers.clear();
    this.routes.clear();
    this.nodes.clear();
    this.requests.clear();
    this.fitted = Boolean(this.area);
  }

  /** Bring the layers in line with what changed in `state` since the last call. */
  sync(state, nowMs) {
    for (const id of state.dirtyVehicles) this.syncVehicle(id, state.vehicles.get(id), nowMs);
    for (const key of state.dirtyNodes) this.syncNode(key, state.nodes.get(key));
    for (const id of state.dirtyRequests) this.syncRequest(id, state.requests.get(id));
    state.dirtyVehicles.clear();
    state.dirtyNodes.clear();
    state.dirtyRequests.clear();
    if (!this.fitted && this.markers.size > 0) this.fitToFleet();
  }

  fitToFleet() {
    const points = [...this.markers.values()].map((m) => m.to);
    if (points.length === 0) return;
    this.map.fitBounds(L.latLngBounds(points), { padding: [40, 40], maxZoom: 15 });
    this.fitted = true;
  }

  syncVehicle(id, v, nowMs) {
    const entry = this.markers.get(id);
    if (!v || v.lat === null) {
      if (entry) entry.marker.remove();
      this.markers.delete(id);
      const route = this.routes.get(id);
      if (route) route.remove();
      this.routes.delete(id);
      return;
    }
    const to = [v.lat, v.lon];
    if (!entry) {
      const icon = L.divIcon({ className: "vehicle-icon", iconSize: [22, 22], iconAnchor: [11, 11],
        html: '<span class="vehicle-body"><span class="vehicle-arrow"></span></span>' });
      const marker = L.marker(to, { icon, keyboard: false, title: `vehicle ${id}` })
        .addTo(this.vehicleLayer);
      const element = marker.getElement();
      element.dataset.testid = "vehicle";
      element.dataset.vehicleId = String(id);
      element.style.setProperty("--vehicle-color", vehicleColor(id));
      this.markers.set(id, { marker, element, from: to, to, t0: nowMs, duration: 0, fixAt: v.fixAt });
    } else if (entry.to[0] !== to[0] || entry.to[1] !== to[1]) {
      // Glide from where the marker is drawn now to the new fix, over the time the last
      // fix took to come (capped), so motion looks continuous at any GPS period.
      const gap = v.fixAt - entry.fixAt;
      entry.from = entry.marker.getLatLng();
      entry.from = [entry.from.lat, entry.from.lng];
      entry.to = to;
      entry.t0 = nowMs;
      entry.duration = this.reducedMotion ? 0 : Math.max(0, Math.min(gap * 0.95, 10000));
      entry.fixAt = v.fixAt;
    }
    const current = this.markers.get(id);
    const el = current.element;
    el.dataset.lat = String(v.lat);
    el.dataset.lon = String(v.lon);
    el.dataset.status = v.status;
    el.classList.toggle("disabled", !v.enabled);
    el.classList.toggle("moving", v.speed > 0);
    el.style.setProperty("--bearing", `${v.bearing || 0}deg`);
    el.title = `vehicle ${id} · ${v.status}${v.enabled ? "" : " (disabled)"}`;
    this.syncRoute(id, v);
  }

  syncRoute(id, v) {
    const old = this.routes.get(id);
    if (old && old.sourceRoute === v.route) return;
    if (old) old.remove();
    this.routes.delete(id);
    if (v.route && v.route.length > 1) {
      const line = L.polyline(v.route, { color: vehicleColor(id), weight: 3, opacity: 0.7,
        renderer: this.renderer, interactive: false });
      line.sourceRoute = v.route;
      line.addTo(this.routeLayer);
      this.routes.set(id, line);
    }
  }

  syncNode(key, node) {
    const old = this.nodes.get(key);
    if (old) old.remove();
    this.nodes.delete(key);
    if (!node) return;
    const style = (NODE_STYLE[node.type] || NODE_STYLE.pickup)[node.status]
      || NODE_STYLE.pickup.assigned;
    const circle = L.circleMarker([node.lat, node.lon], {
      renderer: this.renderer, radius: node.type === "pickup" ? 6 : 5, weight: 2,
      color: style[0], fillColor: node.type === "pickup" ? "#ffffff" : style[0],
      fillOpacity: style[1], opacity: style[1],
    }).bindTooltip(textContent(
      `${node.type} · booking #${node.bookingId} · vehicle ${node.vehicleId} · ${node.status}`));
    circle.addTo(this.nodeLayer);
    this.nodes.set(key, circle);
  }

  syncRequest(id, request) {
    const old = this.requests.get(id);
    if (old) old.remove();
    this.requests.delete(id);
    if (!request) return;
    const color = REQUEST_STYLE[request.status] || REQUEST_STYLE.requested;
    const circle = L.circleMarker([request.lat, request.lon], {
      renderer: this.renderer, radius: 4, weight: 1, color, fillColor: color,
      fillOpacity: request.doneAt === null ? 0.8 : 0.3, dashArray: "2 2",
    }).bindTooltip(textContent(`booking #${id} · ${String(request.status).replace("_", " ")}`));
    circle.addTo(this.nodeLayer);
    this.requests.set(id, circle);
  }

  /** Advance gliding markers; returns whether any is still moving (keep animating). */
  animate(nowMs) {
    let busy = false;
    for (const entry of this.markers.values()) {
      if (entry.duration <= 0 && entry.t0 !== -1) {
        entry.marker.setLatLng(entry.to);
        entry.t0 = -1;
        continue;
      }
      if (entry.t0 === -1) continue;
      const k = Math.min(1, (nowMs - entry.t0) / entry.duration);
      const lat = entry.from[0] + (entry.to[0] - entry.from[0]) * k;
      const lon = entry.from[1] + (entry.to[1] - entry.from[1]) * k;
      entry.marker.setLatLng([lat, lon]);
      if (k >= 1) entry.t0 = -1;
      else busy = true;
    }
    return busy;
  }
}
