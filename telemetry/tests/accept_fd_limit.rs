//! The shared accept loop under descriptor exhaustion: accepts fail with EMFILE while the
//! process is out of descriptors; the loop must back off (not spin on the still-readable
//! listener) and serve the waiting client once descriptors are freed. Alone in its test
//! binary because it lowers the process's descriptor limit (restored on every exit path).

use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tailor_telemetry::accept::AcceptLoop;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Puts the soft descriptor limit back when dropped, also when an assertion fails.
struct RestoreLimit(libc::rlimit);

impl Drop for RestoreLimit {
    fn drop(&mut self) {
        // SAFETY: setrlimit reads the struct we pass.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &self.0) };
    }
}

fn highest_open_fd() -> i32 {
    std::fs::read_dir("/proc/self/fd")
        .expect("read /proc/self/fd")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .max()
        .unwrap_or(2)
}

#[test]
fn backs_off_while_out_of_descriptors_and_serves_once_they_are_freed() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let accept = AcceptLoop::new("fd-limit test");
    let stats = accept.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = runtime.spawn(accept.run(listener, async { _ = stopped.await }, |mut stream| async move {
        let mut buf = [0u8; 16];
        if let Ok(n) = stream.read(&mut buf).await {
            let _ = stream.write_all(&buf[..n]).await;
        }
    }));

    // Lower the soft limit a little above what is open, then use up every descriptor
    // but one, which the client's socket takes: the server's accept has none left.
    let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct we pass.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut old) }, 0);
    let restore = RestoreLimit(old);
    let tight = libc::rlimit { rlim_cur: (highest_open_fd() + 32) as libc::rlim_t, rlim_max: old.rlim_max };
    // SAFETY: setrlimit reads the struct we pass.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &tight) }, 0);
    let mut fillers = Vec::new();
    while let Ok(f) = File::open("/dev/null") {
        fillers.push(f);
    }
    fillers.pop();
    let mut client = TcpStream::connect(addr).expect("connect with the last descriptor");
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();

    std::thread::sleep(Duration::from_millis(500));
    let errors = stats.errors.load(Ordering::Relaxed);
    assert!(errors >= 1, "the accept never failed: the descriptor limit did not bite");
    // Backing off 5 ms doubling to 200 ms fails ~7 times in 500 ms; a busy loop thousands.
    assert!(errors <= 50, "{errors} failed accepts in 500 ms: the loop spins instead of backing off");
    assert_eq!(stats.accepted.load(Ordering::Relaxed), 0);

    drop(fillers);
    drop(restore);
    client.write_all(b"ping").unwrap();
    let mut got = Vec::new();
    client.read_to_end(&mut got).expect("the waiting client is served once descriptors are free");
    assert_eq!(got, b"ping");
    assert_eq!(stats.accepted.load(Ordering::Relaxed), 1);

    stop.send(()).unwrap();
    runtime.block_on(async { tokio::time::timeout(Duration::from_secs(5), running).await }).unwrap().unwrap();
}
