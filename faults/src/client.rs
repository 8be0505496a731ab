//! Raw HTTP/1.1 clients on loopback sockets, so a test controls every byte and its timing:
//! plain requests, answers read by `content-length`, and the slow clients.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A response as the client saw it.
#[derive(Clone, Debug, Default)]
pub struct Answer {
    pub status: u16,
    /// (lower-case name, value)
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// `tailor-error`, else `tailor-shed`, else "" (the reason the proxy gave).
    pub fn reason(&self) -> &str {
        self.header("tailor-error").or_else(|| self.header("tailor-shed")).unwrap_or("")
    }
}

/// Reads one response from `s` (head, then `content-length` bytes, or to EOF without one).
pub fn read_answer(s: &mut TcpStream) -> std::io::Result<Answer> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed before a response"));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|c| c.parse().ok()).unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length = headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.parse::<usize>().ok());
    let mut body = buf[head_end..].to_vec();
    match length {
        Some(len) => {
            while body.len() < len {
                let n = s.read(&mut chunk)?;
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        }
        None => {
            s.read_to_end(&mut body)?;
        }
    }
    Ok(Answer { status, headers, body })
}

/// One request on a fresh connection (`connection: close`), waiting at most `timeout`.
pub fn request(addr: SocketAddr, path: &str, extra: &str, timeout: Duration) -> std::io::Result<Answer> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_nodelay(true)?;
    let head = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n{extra}\r\n");
    if let Err(e) = s.write_all(head.as_bytes()) {
        // A server may answer and close before it has read the whole request (a 431 for
        // an oversized head): the write then fails, but the answer it sent first is in
        // this socket's receive queue. Report the write's error only if there is none.
        if !matches!(e.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset) {
            return Err(e);
        }
        return read_answer(&mut s).map_err(|_| e);
    }
    read_answer(&mut s)
}

/// A GET of `path` that must answer 200 within `timeout`; its body as text.
pub fn get_text(addr: SocketAddr, path: &str, timeout: Duration) -> Option<String> {
    let a = request(addr, path, "", timeout).ok()?;
    (a.status == 200).then(|| String::from_utf8_lossy(&a.body).to_string())
}

/// A request whose `content-length` body is sent one byte every `gap` (a slow client);
/// the answer the proxy gave and when, from the first byte of the body.
pub fn slow_body(
    addr: SocketAddr,
    length: usize,
    gap: Duration,
    timeout: Duration,
) -> (std::io::Result<Answer>, Duration) {
    let start = Instant::now();
    let run = || -> std::io::Result<Answer> {
        let mut s = TcpStream::connect_timeout(&addr, timeout)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(timeout))?;
        write!(s, "POST / HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {length}\r\n\r\n")?;
        let mut writer = s.try_clone()?;
        // The writer trickles until the proxy closes or the body is sent; the answer
        // arrives while it still trickles.
        let trickle = std::thread::spawn(move || {
            for _ in 0..length {
                if writer.write_all(b"x").is_err() {
                    return;
                }
                std::thread::sleep(gap);
            }
        });
        let answer = read_answer(&mut s);
        let _ = s.shutdown(std::net::Shutdown::Both);
        let _ = trickle.join();
        answer
    };
    let answer = run();
    (answer, start.elapsed())
}

/// Opens a connection and sends the first `sent` bytes of a request head, one per `gap`
/// (slowloris); returns the socket to keep it open.
pub fn slowloris_start(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n")?;
    Ok(s)
}

/// Sends one more header byte on a slowloris connection: false once the proxy closed it.
pub fn slowloris_trickle(s: &mut TcpStream) -> bool {
    s.write_all(b"x").is_ok()
}
