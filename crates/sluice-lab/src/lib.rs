//! iSCSI performance lab: load generation, sweeps, models, simulation
