"""Hosting of simulator runs: clocks, runners, leases, the journal and publishing.

This is the I/O side of the simulator: it drives the pure engines of ``simulator.core`` in
real or accelerated time, owns each run's lease and journal in the store, forwards commands
to a run's owner over the bus, takes over runs whose owner stopped, and hands the engines'
events to the event log.
"""
