//! Simulation tests.
