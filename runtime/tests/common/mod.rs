//! Helpers shared by the async integration tests.

use std::time::{Duration, Instant};

/// Polls `cond` every millisecond until it holds; fails the test after 20 s naming `what`.
pub async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(20), "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
