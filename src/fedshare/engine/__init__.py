"""The simulated-round engine (see `fedshare.engine.simulation.Simulation`)."""
