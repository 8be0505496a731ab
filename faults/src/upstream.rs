//! The upstream the proxy faults are injected into: a plain HTTP/1.1 server in its own
//! process (so it can be killed and stopped), with a fixed number of workers that each
//! take `service_ms` per request, so its capacity is `workers × 1000 / service_ms` per
//! second on any machine.
//!
//! `GET /?ms=N` takes N ms instead; `GET /reset` reads the request and resets the
//! connection (SO_LINGER 0); `GET /bytes=N` answers N bytes. Every request body is read
//! whole (by `content-length`) before the answer. It prints `ready ADDR` once listening.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How the upstream role is run.
#[derive(Clone, Debug)]
pub struct UpstreamArgs {
    pub listen: String,
    pub workers: usize,
    pub service_ms: u64,
}

impl UpstreamArgs {
    pub fn parse(args: &[String]) -> Result<UpstreamArgs, String> {
        let mut a = UpstreamArgs { listen: "127.0.0.1:0".into(), workers: 4, service_ms: 10 };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let bad = |e: std::num::ParseIntError| format!("{flag} {value}: {e}");
            match flag.as_str() {
                "--listen" => a.listen = value.clone(),
                "--workers" => a.workers = value.parse().map_err(bad)?,
                "--service-ms" => a.service_ms = value.parse().map_err(bad)?,
                _ => return Err(format!("unknown upstream option {flag}")),
            }
        }
        if a.workers == 0 {
            return Err("--workers must be at least 1".into());
        }
        Ok(a)
    }
}

/// `workers` CPUs' worth of service: a request holds one for its service time.
struct Workers {
    free: Mutex<usize>,
    freed: Condvar,
}

impl Workers {
    fn run(&self, d: Duration) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        while *free == 0 {
            free = self.freed.wait(free).unwrap_or_else(|p| p.into_inner());
        }
        *free -= 1;
        drop(free);
        std::thread::sleep(d);
        *self.free.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.freed.notify_one();
    }
}

/// Serves until killed.
pub fn serve(args: &UpstreamArgs) -> Result<(), String> {
    let listener = TcpListener::bind(&args.listen).map_err(|e| format!("binding {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("ready {addr}");
    let _ = std::io::stdout().flush();
    let workers = Arc::new(Workers { free: Mutex::new(args.workers), freed: Condvar::new() });
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let (workers, service_ms) = (workers.clone(), args.service_ms);
        std::thread::spawn(move || connection(stream, &workers, service_ms));
    }
    Ok(())
}

/// One keep-alive connection: requests one after the other until the client closes.
fn connection(stream: TcpStream, workers: &Workers, service_ms: u64) {
    let _ = stream.set_nodelay(true);
    let Ok(write_half) = stream.try_clone() else { return };
    let mut out = write_half;
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0usize;
        let mut chunked = false;
        let mut close = false;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').unwrap_or((line, ""));
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.trim().eq_ignore_ascii_case("chunked");
            } else if name.eq_ignore_ascii_case("connection") && value.trim().eq_ignore_ascii_case("close") {
                close = true;
            }
        }
        let body_read = if chunked { skip_chunked(&mut reader) } else { skip_exact(&mut reader, length) };
        if body_read.is_err() {
            return;
        }
        let target = request_line.split_whitespace().nth(1).unwrap_or("/").to_string();
        if target.starts_with("/reset") {
            // A reset, not a close: the proxy sees ECONNRESET with no response.
            let _ = socket_linger_zero(&out);
            return;
        }
        let query = |key: &str| {
            target.split(['?', '&', '/']).find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse::<u64>().ok())
        };
        workers.run(Duration::from_millis(query("ms").unwrap_or(service_ms)));
        let size = query("bytes").unwrap_or(3) as usize;
        let mut answer =
            format!("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {size}\r\n").into_bytes();
        if close {
            answer.extend_from_slice(b"connection: close\r\n");
        }
        answer.extend_from_slice(b"\r\n");
        answer.extend(std::iter::repeat_n(b'x', size.saturating_sub(1)));
        if size > 0 {
            answer.push(b'\n');
        }
        if out.write_all(&answer).is_err() || close {
            return;
        }
    }
}

fn skip_exact(reader: &mut impl Read, n: usize) -> std::io::Result<()> {
    let copied = std::io::copy(&mut reader.take(n as u64), &mut std::io::sink())?;
    if copied == n as u64 {
        Ok(())
    } else {
        Err(std::io::ErrorKind::UnexpectedEof.into())
    }
}

/// Reads a chunked body to its last chunk (and the empty trailer section).
fn skip_chunked(reader: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let mut size = String::new();
        if reader.read_line(&mut size)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let hex = size.trim().split(';').next().unwrap_or("");
        let n = usize::from_str_radix(hex, 16).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidData))?;
        if n == 0 {
            let mut line = String::new();
            while reader.read_line(&mut line)? > 0 && !line.trim().is_empty() {
                line.clear();
            }
            return Ok(());
        }
        skip_exact(reader, n + 2)?;
    }
}

fn socket_linger_zero(stream: &TcpStream) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: setsockopt on a socket we own, with a correctly sized `linger`.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
