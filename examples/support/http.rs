//! The examples' HTTP client: a minimal HTTP/1.1 request, so they need no
//! client crate. Included by `#[path = "support/http.rs"] mod http;`.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends `method path` with an empty body to `addr` and returns the status
/// line and the body, trimmed, joined by a space.
pub async fn request(addr: std::net::SocketAddr, method: &str, path: &str) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response.lines().next().unwrap_or_default().to_owned();
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default().trim().to_owned();
    Ok(format!("{status} {body}"))
}
