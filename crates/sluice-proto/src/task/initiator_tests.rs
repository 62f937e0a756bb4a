//! Initiator-side unit tests.
