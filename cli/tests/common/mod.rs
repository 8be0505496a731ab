//! Helpers shared by the integration tests that run `tailor proxy` as a real process.
// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

pub mod proxy_proc;
