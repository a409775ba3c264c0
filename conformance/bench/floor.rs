//! The least an HTTP/1.1 server can do on this machine, for scripts/ds-floor.sh:
//! a blocking thread per connection, no parsing beyond the head's lines and
//! Content-Length, no storage. A POST gets a canned 204 with a
//! Stream-Next-Offset (what conformance/bench/append.lua checks), a GET a
//! prebuilt 200 of BODY_BYTES. Whatever a real server measures above this
//! on the same load is its own cost; what this reaches is the ceiling the
//! loopback and wrk set for every server.
//!
//!   rustc -O --edition 2021 floor.rs -o floor && ./floor PORT [BODY_BYTES]
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

const APPENDED: &[u8] =
    b"HTTP/1.1 204 No Content\r\nstream-next-offset: 0000000000000001_0000000000000100\r\n\r\n";

fn main() {
    let mut args = std::env::args().skip(1);
    let port: u16 = match args.next().and_then(|p| p.parse().ok()) {
        Some(port) => port,
        None => {
            eprintln!("usage: floor PORT [BODY_BYTES]");
            std::process::exit(2);
        }
    };
    let body_bytes: usize = args.next().and_then(|b| b.parse().ok()).unwrap_or(786_432);
    let mut read = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nstream-next-offset: 1\r\n\
         stream-up-to-date: true\r\ncontent-length: {body_bytes}\r\n\r\n"
    )
    .into_bytes();
    read.resize(read.len() + body_bytes, b'x');
    let read = Arc::new(read);
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind");
    println!("listening on http://127.0.0.1:{port}");
    for conn in listener.incoming().flatten() {
        let read = Arc::clone(&read);
        std::thread::spawn(move || {
            let _ = serve(conn, &read);
        });
    }
}

/// Answers the connection's requests until it closes or sends something
/// this does not read (then the connection is dropped).
fn serve(conn: TcpStream, read: &[u8]) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let mut out = conn.try_clone()?;
    let mut input = BufReader::new(conn);
    let mut line = String::new();
    let mut body = Vec::new();
    loop {
        line.clear();
        if input.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let is_get = line.starts_with("GET ");
        let mut content_length = 0usize;
        loop {
            line.clear();
            if input.read_line(&mut line)? == 0 {
                return Ok(());
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    content_length = value.trim().parse().map_err(|_| std::io::ErrorKind::InvalidData)?;
                }
            }
        }
        body.resize(content_length, 0);
        input.read_exact(&mut body)?;
        out.write_all(if is_get { read } else { APPENDED })?;
    }
}
