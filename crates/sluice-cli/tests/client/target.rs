//! A `sluice target` in-process on 127.0.0.1:0 for end-to-end tests (shared with the
//! initiator's tests through sluice-test-support).
#![allow(unused_imports)]

pub use sluice_test_support::{chap, config, TestTarget, IQN};
