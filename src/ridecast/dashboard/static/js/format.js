// How events, times and numbers read on the page. Pure: strings in, strings out.

/** The 18 message types, in the order of a booking's life, with the feed's colour. */
export const TYPES = [
  ["bookings", "#2563eb"],
  ["calc_started", "#64748b"],
  ["scheduler_result", "#64748b"],
  ["offers", "#7c3aed"],
  ["offer_accepted", "#059669"],
  ["offer_rejected", "#d97706"],
  ["no_offer", "#dc2626"],
  ["bookings_cancellation", "#dc2626"],
  ["assignment", "#0891b2"],
  ["vehicle_state_changed", "#0e7490"],
  ["vehicle_arrival", "#475569"],
  ["vehicle_arrival_grouped", "#475569"],
  ["node_status", "#16a34a"],
  ["fail_to_board", "#b91c1c"],
  ["demand_modification", "#9333ea"],
  ["vehicle_use", "#ca8a04"],
  ["vehicle_states", "#334155"],
  ["gps_data", "#94a3b8"],
];

export const TYPE_COLOR = new Map(TYPES);

const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
const list = (ids) => (Array.isArray(ids) ? ids.map((id) => `#${id}`).join(", ") : "");
const coord = (value) => (typeof value === "number" ? value.toFixed(5) : "?");

/** "HH:MM:SS" of an ISO 8601 timestamp, in the browser's time zone. */
export function clock(iso) {
  if (typeof iso !== "string") return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return "";
  return date.toLocaleTimeString([], { hour12: false });
}

/** One line that says what an event means. */
export function summarize(event) {
  const d = (event && event.data) || {};
  switch (event && event.message_type) {
    case "bookings":
      return (d.bookings || []).map((b) => `booking #${b.id} at ${coord(b.pickup_lat)}, ${coord(b.pickup_lon)}`).join("; ");
    case "bookings_cancellation":
      return `cancelled ${list(d.booking_ids)}${d.reason ? ` (${d.reason})` : ""}`;
    case "fail_to_board":
      return `no-show ${list(d.booking_ids)}${d.vehicle_id !== undefined ? ` · vehicle ${d.vehicle_id}` : ""}`;
    case "offers":
      return (d.offers || []).map((o) => `offer #${o.id}, pickup ${clock(o.estimated_pickup_time)}`).join("; ");
    case "offer_accepted":
      return `offer #${d.offer_id} accepted`;
    case "offer_rejected":
      return `offer #${d.offer_id} rejected${d.reason ? ` (${d.reason})` : ""}`;
    case "no_offer":
      return `no offer for ${list(d.booking_ids)}`;
    case "calc_started":
      return `calculating ${list(d.booking_ids)}`;
    case "scheduler_result":
      return `vehicle ${d.vehicle_id}: ${plural((d.nodes || []).length, "node")}`;
    case "assignment":
      return `vehicle ${d.vehicle_id}: ${plural((d.nodes || []).length, "node")}, ${plural((d.edges || []).length, "edge")}`;
    case "vehicle_arrival":
      return `vehicle ${d.vehicle_id} at ${d.node_type || "node"} ${d.node_id} by ${clock(d.estimated_earliest_arrival_ts)}`;
    case "vehicle_arrival_grouped":
      return `vehicle ${d.vehicle_id}: ${plural((d.arrivals || []).length, "arrival")}`;
    case "node_status": {
      const action = d.action_data && d.action_data.action_type;
      return `vehicle ${d.vehicle_id}: ${d.node_type || "node"} ${d.status || ""}${action ? ` (${action})` : ""}`;
    }
    case "vehicle_state_changed":
      return `vehicle ${d.vehicle_id}${d.nodes_changed ? ": new route" : ""}${d.update && d.update.status ? ` · ${d.update.status}` : ""}`;
    case "vehicle_states":
      return plural((d.vehicle_states || []).length, "vehicle");
    case "gps_data":
      return `vehicle ${d.vehicle_id} → ${coord(d.lat)}, ${coord(d.lon)}${typeof d.speed === "number" ? ` · ${(d.speed * 3.6).toFixed(0)} km/h` : ""}`;
    case "vehicle_use":
      return `vehicle ${d.vehicle_id} ${d.action}${d.reason ? ` (${d.reason})` : ""}`;
    case "demand_modification":
      return `vehicle ${d.vehicle_id}, node ${d.node_id}: ${(d.tickets || []).map((t) => `${t.demand} ${t.ticket_type}`).join(", ")}`;
    default:
      return "";
  }
}

/** A KPI value as people read it: rates in %, seconds as m:ss, numbers trimmed. */
export function kpiValue(name, value) {
  if (value === null || value === undefined) return "–";
  if (typeof value !== "number") return String(value);
  if (name.endsWith("_rate") || name.endsWith("_share") || name === "fleet_utilisation") {
    return `${(value * 100).toFixed(1)} %`;
  }
  if (name === "occupancy" || name.includes("_over_")) return value.toFixed(2);
  if (name.endsWith("_s")) {
    const s = Math.abs(Math.round(value));
    return `${value <= -0.5 ? "-" : ""}${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
  }
  if (name.endsWith("_km")) return `${value.toFixed(1)} km`;
  if (name.endsWith("_ms") || name.includes("_ms_")) return `${value.toFixed(2)} ms`;
  return Number.isInteger(value) ? value.toLocaleString() : value.toFixed(2);
}

/**
 * What each KPI of GET .../simulator counts: [label on the tile, longer explanation].
 * "Refused" is the system's own refusal (no_offer); riders' rejections and expired offers are
 * counted apart, so no tile lumps different outcomes together.
 */
export const KPI_LABELS = {
  bookings: ["booking requests", "Booking requests made in this run."],
  served: ["riders dropped off", "Bookings completed: picked up and dropped off."],
  on_board: ["riders on board now", "Bookings picked up and not yet dropped off."],
  rejected_rate: ["refused: no offer, % of requests",
    "no_offer ÷ booking requests. Offers that riders rejected or let expire are not in it."],
  no_offer: ["refused: no offer", "Booking requests answered with no_offer."],
  offered: ["offers made", "Offers sent to riders."],
  accepted: ["offers accepted by riders", "Offers that riders accepted."],
  offers_rejected: ["offers rejected by riders", "Offers that riders turned down."],
  offers_expired: ["offers expired unanswered", "Offers that riders let expire."],
  no_shows: ["no-shows", "Riders who did not board at pickup (fail_to_board)."],
  cancellations: ["cancelled by riders", "Bookings cancelled before pickup."],
  wait_mean_s: ["wait for pickup, mean (m:ss)", "Pickup time minus request time, mean."],
  wait_p95_s: ["wait for pickup, p95 (m:ss)", "Pickup time minus request time, 95th percentile."],
  ride_over_direct_mean: ["ride time ÷ direct time, mean",
    "Time on board over the direct drive's time (1.00 = no detour)."],
  occupancy: ["occupancy: passenger-km ÷ vehicle-km",
    "Passenger-km ÷ vehicle-km: riders on board, averaged over every km driven."],
  punctual_share: ["pickups within 1 min of the offer",
    "Share of pickups within 60 s of the pickup time offered (punctuality)."],
  pickup_late_mean_s: ["pickup vs offered time, mean (m:ss)",
    "Actual pickup minus the pickup time offered, mean (negative: early)."],
  served_share: ["served, % of requests", "Riders dropped off ÷ booking requests."],
  fleet_utilisation: ["fleet utilisation", "Share of vehicle time with stops to make."],
  pooling_share: ["pooled, % of served", "Served riders who shared any part of their ride."],
  distance_saved: ["direct km ÷ vehicle-km",
    "Direct km of served riders ÷ vehicle-km driven: above 1, pooling saves distance."],
  rides_per_vehicle_hour: ["rides per vehicle-hour", "Riders dropped off per vehicle-hour."],
  rebalancing_km: ["km driven rebalancing",
    "Vehicle-km driven empty towards where requests were seen (rebalancing)."],
  vehicle_km: ["km driven, all vehicles", "Vehicle-km driven in this run."],
  empty_km: ["km driven empty", "Vehicle-km driven with nobody on board."],
  passenger_km: ["passenger-km", "Km travelled by riders on board, summed."],
  vehicles: ["vehicles", "Vehicles in the fleet."],
  vehicles_enabled: ["vehicles on duty", "Vehicles enabled (not taken off duty by vehicle_use)."],
  scheduler_decisions: ["scheduler decisions", "Booking requests the scheduler decided on."],
  scheduler_decision_ms_p50: ["scheduler decision time, p50", "Wall-clock time per decision."],
  scheduler_decision_ms_p99: ["scheduler decision time, p99", "Wall-clock time per decision."],
};

/** The tile label of a KPI; an unknown one reads as its name ("wait_mean_s" -> "wait mean"). */
export function kpiLabel(name) {
  if (KPI_LABELS[name]) return KPI_LABELS[name][0];
  return name.replace(/_s$/, "").replace(/_ms_/, " ").replaceAll("_", " ");
}

/** The longer explanation of a KPI (the tile's tooltip), or "". */
export function kpiTitle(name) {
  return KPI_LABELS[name] ? KPI_LABELS[name][1] : "";
}

/** A stable colour per vehicle, spread around the hue circle. */
export function vehicleColor(id) {
  const hue = Math.round((Number(id) * 137.508) % 360);
  return `hsl(${hue} 70% 42%)`;
}
