//! Whether a guest serves on a forwarded port. Through QEMU's user networking a connect alone
//! proves nothing: QEMU accepts on the guest's behalf before the guest has even booted. So the
//! check sends an HTTP `HEAD` request and counts the guest healthy when bytes come back (an
//! HTTP server answers it; an SSH server speaks first).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Whether the guest's server at `target` (a forward on loopback, or the guest's address on a
/// bridge) answers within `deadline`.
pub async fn answers(target: SocketAddr, deadline: Duration) -> bool {
    let check = async {
        let mut stream = tokio::net::TcpStream::connect(target).await?;
        stream.write_all(b"HEAD / HTTP/1.0\r\n\r\n").await?;
        let mut byte = [0u8; 1];
        stream.read(&mut byte).await
    };
    matches!(tokio::time::timeout(deadline, check).await, Ok(Ok(n)) if n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[tokio::test]
    async fn a_server_that_answers_is_healthy_one_that_closes_is_not() {
        let answering = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = answering.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = answering.accept().await.unwrap();
            let mut buf = [0u8; 64];
            let _ = s.read(&mut buf).await;
            s.write_all(b"HTTP/1.0 200 OK\r\n\r\n").await.unwrap();
        });
        assert!(answers(loopback(port), Duration::from_secs(2)).await);

        // What QEMU does for a guest port nothing listens on: accept, then close.
        let closing = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = closing.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (s, _) = closing.accept().await.unwrap();
            drop(s);
        });
        assert!(!answers(loopback(port), Duration::from_secs(2)).await);

        // What QEMU does for a guest that has not booted: accept and say nothing.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = silent.local_addr().unwrap().port();
        let _held = tokio::spawn(async move {
            let (s, _) = silent.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop(s);
        });
        assert!(!answers(loopback(port), Duration::from_millis(300)).await);
    }
}
