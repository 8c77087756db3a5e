// Which run of the simulator the page shows. A simulation's simulator may run many times (the
// demo restarted, Start pressed); each run starts its clock, its booking ids and its fleet
// afresh, so the page shows one run at a time: the current one. Pure: no DOM, no Leaflet.
//
// A run is known by its start (`started_sim_ts` in GET .../simulator). Two runs with the same
// start (a fixed `start_ts` run again) are told apart by the simulator's own event count
// (`kpis.events`), which only grows within a run. The first event of every run is its
// `vehicle_states` snapshot at the run's start: in a replay, that is where the run begins.

/** The identity of the run a status answer describes, or null before any run. */
export function runOf(status) {
  if (!status || typeof status.started_sim_ts !== "string") return null;
  const kpis = status.kpis || {};
  const settings = status.settings || {};
  return {
    start: status.started_sim_ts,
    seed: settings.seed === undefined ? null : settings.seed,
    events: typeof kpis.events === "number" ? kpis.events : null,
  };
}

/** Whether `event` is the first one of the run that started at `start`. */
export function isRunStart(event, start) {
  return Boolean(start) && event && event.message_type === "vehicle_states"
    && event.current_sim_ts === start;
}

export class RunTracker {
  constructor() {
    this.run = null;
  }

  /**
   * Take a status answer; true when it describes another run than the one tracked so far
   * (the page must then show the new run from its start), false for the same run or the
   * first one seen.
   */
  observe(status) {
    const run = runOf(status);
    if (!run) return false;
    const before = this.run;
    this.run = run;
    if (!before) return false;
    if (run.start !== before.start) return true;
    return run.events !== null && before.events !== null && run.events < before.events;
  }

  get start() {
    return this.run ? this.run.start : null;
  }
}
