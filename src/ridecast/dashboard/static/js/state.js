// The fleet as the events describe it: vehicles, their routes, route nodes and open booking
// requests. Pure: `apply(event, nowMs)` changes the model and records what changed, the map
// draws from it. No DOM, no Leaflet, so it can be tested on its own.

import { decodePolyline, joinEdges } from "./polyline.js";

/** How long finished things (completed nodes, no-shows, cancelled requests) stay visible. */
export const FADE_MS = 8000;

/** A vehicle counts as moving while its last fix is younger than this and speed > 0. */
export const MOVING_MS = 30000;

const num = (value) => (typeof value === "number" && Number.isFinite(value) ? value : null);

export class FleetState {
  constructor() {
    /** @type {Map<number, object>} vehicle id -> vehicle */
    this.vehicles = new Map();
    /** @type {Map<string, object>} node key -> node (key: uid, else "id:<id>") */
    this.nodes = new Map();
    /** @type {Map<number, object>} booking id -> request waiting for an assignment */
    this.requests = new Map();
    this.bookingUid = new Map(); // booking uid -> booking id (offers name bookings by uid)
    this.nodeKeyById = new Map(); // node id -> node key
    this.dirtyVehicles = new Set();
    this.dirtyNodes = new Set();
    this.dirtyRequests = new Set();
    this.lastSimTs = null;
  }

  clear() {
    for (const id of this.vehicles.keys()) this.dirtyVehicles.add(id);
    for (const key of this.nodes.keys()) this.dirtyNodes.add(key);
    for (const id of this.requests.keys()) this.dirtyRequests.add(id);
    this.vehicles.clear();
    this.nodes.clear();
    this.requests.clear();
    this.bookingUid.clear();
    this.nodeKeyById.clear();
    this.lastSimTs = null;
  }

  vehicle(id) {
    let v = this.vehicles.get(id);
    if (!v) {
      v = { id, lat: null, lon: null, bearing: 0, speed: 0, status: "idle", enabled: true,
        fixAt: 0, route: [], nodeKeys: [] };
      this.vehicles.set(id, v);
    }
    this.dirtyVehicles.add(id);
    return v;
  }

  setPosition(id, lat, lon, extra, nowMs) {
    if (num(lat) === null || num(lon) === null) return;
    const v = this.vehicle(id);
    v.lat = lat;
    v.lon = lon;
    if (extra.bearing !== null) v.bearing = extra.bearing;
    if (extra.speed !== null) v.speed = extra.speed;
    v.fixAt = nowMs;
  }

  setStatus(id, status) {
    const v = this.vehicle(id);
    v.status = status;
    // An idle vehicle sends no more fixes: its last speed must not keep it "moving".
    if (status === "idle") v.speed = 0;
  }

  setNodeStatus(key, status, nowMs) {
    const node = this.nodes.get(key);
    if (!node) return;
    node.status = status;
    node.doneAt = status === "assigned" ? null : nowMs;
    this.dirtyNodes.add(key);
  }

  nodeKeysOfBooking(bookingId) {
    const keys = [];
    for (const [key, node] of this.nodes) if (node.bookingId === bookingId) keys.push(key);
    return keys;
  }

  endRequest(bookingId, status, nowMs) {
    const request = this.requests.get(bookingId);
    if (!request) return;
    request.status = status;
    request.doneAt = nowMs;
    this.dirtyRequests.add(bookingId);
  }

  /**
   * Apply one event (the envelope as received, with `message_type` and `data`).
   * @returns {boolean} whether the fleet changed
   */
  apply(event, nowMs) {
    const d = event && event.data;
    if (!d || typeof d !== "object") return false;
    if (event.current_sim_ts) this.lastSimTs = event.current_sim_ts;
    switch (event.message_type) {
      case "gps_data":
        this.setPosition(d.vehicle_id, d.lat, d.lon,
          { bearing: num(d.bearing), speed: num(d.speed) }, nowMs);
        return true;
      case "vehicle_states":
        for (const s of d.vehicle_states || []) {
          this.setPosition(s.id, s.lat, s.lon, { bearing: null, speed: null }, nowMs);
          if (typeof s.status === "string" && this.vehicles.has(s.id)) this.setStatus(s.id, s.status);
        }
        return true;
      case "vehicle_use": {
        const v = this.vehicle(d.vehicle_id);
        v.enabled = d.action !== "disabled";
        return true;
      }
      case "vehicle_state_changed": {
        const v = this.vehicle(d.vehicle_id);
        const update = d.update || {};
        if (typeof update.status === "string") this.setStatus(d.vehicle_id, update.status);
        if (typeof update.path === "string") {
          try {
            v.route = decodePolyline(update.path);
          } catch {
            /* keep the previous route: a bad path must not blank the map */
          }
        }
        return true;
      }
      case "assignment":
        this.applyAssignment(d, nowMs);
        return true;
      case "node_status": {
        const key = d.node_uid || this.nodeKeyById.get(d.node_id);
        const action = d.action_data && d.action_data.action_type;
        this.setNodeStatus(key, action === "no_show" ? "no_show" : d.status || "completed", nowMs);
        return true;
      }
      case "fail_to_board":
        for (const bookingId of d.booking_ids || []) {
          for (const key of this.nodeKeysOfBooking(bookingId)) {
            const node = this.nodes.get(key);
            this.setNodeStatus(key, node.type === "pickup" ? "no_show" : "cancelled", nowMs);
          }
        }
        return true;
      case "bookings":
        for (const b of d.bookings || []) {
          if (num(b.pickup_lat) === null || num(b.pickup_lon) === null) continue;
          this.requests.set(b.id, { id: b.id, lat: b.pickup_lat, lon: b.pickup_lon,
            status: "requested", doneAt: null });
          if (b.uid) this.bookingUid.set(b.uid, b.id);
          this.dirtyRequests.add(b.id);
        }
        return true;
      case "offers":
        for (const offer of d.offers || []) {
          const id = this.bookingUid.get(offer.booking_id);
          const request = this.requests.get(id);
          if (request && request.status === "requested") {
            request.status = "offered";
            this.dirtyRequests.add(id);
          }
        }
        return true;
      case "no_offer":
        for (const id of d.booking_ids || []) this.endRequest(id, "no_offer", nowMs);
        return true;
      case "bookings_cancellation":
        for (const id of d.booking_ids || []) {
          this.endRequest(id, "cancelled", nowMs);
          for (const key of this.nodeKeysOfBooking(id)) this.setNodeStatus(key, "cancelled", nowMs);
        }
        return true;
      default:
        return false;
    }
  }

  applyAssignment(d, nowMs) {
    const v = this.vehicle(d.vehicle_id);
    const fresh = new Set();
    for (const n of d.nodes || []) {
      if (num(n.lat) === null || num(n.lon) === null) continue;
      const key = n.uid || `id:${n.id}`;
      fresh.add(key);
      const old = this.nodes.get(key);
      this.nodes.set(key, {
        key, id: n.id, lat: n.lat, lon: n.lon, type: n.node_type, bookingId: n.booking_id,
        vehicleId: d.vehicle_id, status: old && old.status !== "assigned" ? old.status : "assigned",
        doneAt: old ? old.doneAt : null,
      });
      if (n.id !== undefined) this.nodeKeyById.set(n.id, key);
      this.dirtyNodes.add(key);
      // The request has become route nodes: its own marker goes.
      if (this.requests.delete(n.booking_id)) this.dirtyRequests.add(n.booking_id);
    }
    // Nodes this vehicle no longer serves moved to another vehicle or were dropped.
    for (const key of v.nodeKeys) {
      const node = this.nodes.get(key);
      if (!fresh.has(key) && node && node.vehicleId === d.vehicle_id && node.status === "assigned") {
        this.nodes.delete(key);
        this.dirtyNodes.add(key);
      }
    }
    v.nodeKeys = [...fresh];
    const line = joinEdges(d.edges);
    if (line.length > 1 || (d.nodes || []).length === 0) v.route = line;
  }

  /** Drop finished nodes and requests older than FADE_MS. */
  prune(nowMs) {
    for (const [key, node] of this.nodes) {
      if (node.doneAt !== null && nowMs - node.doneAt > FADE_MS) {
        this.nodes.delete(key);
        this.dirtyNodes.add(key);
      }
    }
    for (const [id, request] of this.requests) {
      if (request.doneAt !== null && nowMs - request.doneAt > FADE_MS) {
        this.requests.delete(id);
        this.dirtyRequests.add(id);
      }
    }
  }

  /** Counts for the map legend. */
  summary(nowMs) {
    let positioned = 0;
    let moving = 0;
    let disabled = 0;
    for (const v of this.vehicles.values()) {
      if (v.lat === null) continue;
      positioned += 1;
      if (!v.enabled) disabled += 1;
      else if (v.speed > 0 && nowMs - v.fixAt < MOVING_MS) moving += 1;
    }
    let pickups = 0;
    let dropoffs = 0;
    for (const node of this.nodes.values()) {
      if (node.status !== "assigned") continue;
      if (node.type === "pickup") pickups += 1;
      else dropoffs += 1;
    }
    let waiting = 0;
    for (const r of this.requests.values()) if (r.doneAt === null) waiting += 1;
    return { vehicles: positioned, moving, disabled, pickups, dropoffs, waiting };
  }
}
