"""The ridecast command line."""
