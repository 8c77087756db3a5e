// Google's encoded polyline format at precision 5 (the `polyline5` of assignment edges and the
// `update.path` of vehicle_state_changed). Pure: no DOM, no Leaflet.

/**
 * Decode an encoded polyline into [lat, lon] pairs.
 * Throws an Error on a truncated string or a character outside the alphabet, so that a bad
 * edge is reported rather than drawn as a line across the map.
 * @param {string} text
 * @param {number} [precision=5]
 * @returns {Array<[number, number]>}
 */
export function decodePolyline(text, precision = 5) {
  const factor = 10 ** precision;
  const points = [];
  let index = 0;
  let lat = 0;
  let lon = 0;
  while (index < text.length) {
    const deltas = [0, 0];
    for (let k = 0; k < 2; k += 1) {
      let shift = 0;
      let result = 0;
      let byte;
      do {
        if (index >= text.length) throw new Error("truncated polyline");
        byte = text.charCodeAt(index) - 63;
        index += 1;
        if (byte < 0 || byte > 63) throw new Error(`invalid polyline character at ${index - 1}`);
        // Multiplication instead of << keeps long (garbage) chunks from wrapping at 32 bits.
        result += (byte & 0x1f) * 2 ** shift;
        shift += 5;
      } while (byte >= 0x20);
      deltas[k] = result % 2 === 1 ? -(result + 1) / 2 : result / 2;
    }
    lat += deltas[0];
    lon += deltas[1];
    points.push([lat / factor, lon / factor]);
  }
  return points;
}

/**
 * Decode a route's edges in order and join them into one line, dropping the point where one
 * edge ends and the next begins. Undecodable edges are skipped.
 * @param {Array<{polyline5?: string}>} edges
 * @returns {Array<[number, number]>}
 */
export function joinEdges(edges) {
  const line = [];
  for (const edge of edges || []) {
    if (!edge || typeof edge.polyline5 !== "string") continue;
    let points;
    try {
      points = decodePolyline(edge.polyline5);
    } catch {
      continue;
    }
    for (const point of points) {
      const last = line[line.length - 1];
      if (!last || last[0] !== point[0] || last[1] !== point[1]) line.push(point);
    }
  }
  return line;
}
