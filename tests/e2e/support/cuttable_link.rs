//! A TCP link a test can cut ([`CuttableLink`]): forwards a local port to a target, and on
//! request refuses connections (nothing listens on the port) or blackholes them (takes
//! them, and everything sent on them, and never answers), as a network between an agent and
//! its controller can. It runs on a thread of its own, so blocking tests can use it.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;

/// What the link does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkMode {
    /// Forwards them to the target.
    Open,
    /// Nothing listens: connecting fails at once (`ECONNREFUSED`); open connections are closed.
    Refusing,
    /// Takes connections and never answers; open connections go silent.
    Blackhole,
}

/// A link from `127.0.0.1:port` to a target address. Stops when dropped.
pub struct CuttableLink {
    pub port: u16,
    mode: watch::Sender<LinkMode>,
    accepted: Arc<Mutex<Vec<(Instant, LinkMode)>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CuttableLink {
    /// An open link to `target` (`host:port`) on a free local port.
    pub fn open(target: &str) -> CuttableLink {
        let port = crate::support::free_port();
        let (mode, modes) = watch::channel(LinkMode::Open);
        let accepted: Arc<Mutex<Vec<(Instant, LinkMode)>>> = Arc::default();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let target = target.to_string();
        let log = accepted.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the link");
            runtime.block_on(async move {
                tokio::select! {
                    _ = serve(port, target, modes, log) => {}
                    _ = stopped => {}
                }
            });
        });
        let link = CuttableLink {
            port,
            mode,
            accepted,
            stop: Some(stop),
            thread: Some(thread),
        };
        crate::support::wait_for(
            "the link to listen",
            std::time::Duration::from_secs(10),
            || std::net::TcpStream::connect(("127.0.0.1", port)).ok(),
        );
        link
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn set(&self, mode: LinkMode) {
        self.mode.send_replace(mode);
    }

    /// When each connection was taken, and in which mode.
    pub fn accepted(&self) -> Vec<(Instant, LinkMode)> {
        self.accepted.lock().unwrap().clone()
    }
}

impl Drop for CuttableLink {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn listen(port: u16) -> TcpListener {
    // SO_REUSEADDR: the port is bound again after each refusing spell.
    loop {
        let socket = TcpSocket::new_v4().expect("a socket");
        socket.set_reuseaddr(true).expect("SO_REUSEADDR");
        if socket.bind(([127, 0, 0, 1], port).into()).is_ok() {
            if let Ok(listener) = socket.listen(1024) {
                return listener;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

async fn serve(
    port: u16,
    target: String,
    mut modes: watch::Receiver<LinkMode>,
    accepted: Arc<Mutex<Vec<(Instant, LinkMode)>>>,
) {
    loop {
        // Refusing: no listener at all until the mode changes.
        while *modes.borrow_and_update() == LinkMode::Refusing {
            if modes.changed().await.is_err() {
                return;
            }
        }
        let listener = listen(port).await;
        loop {
            tokio::select! {
                taken = listener.accept() => {
                    let Ok((stream, _)) = taken else { continue };
                    let mode = *modes.borrow();
                    accepted.lock().unwrap().push((Instant::now(), mode));
                    tokio::spawn(carry(stream, target.clone(), mode, modes.clone()));
                }
                changed = modes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if *modes.borrow() == LinkMode::Refusing {
                        break;
                    }
                }
            }
        }
        drop(listener);
    }
}

/// One connection: forwarded while the link is open; once it goes silent, read and dropped;
/// closed when the link refuses, or when it opens again after a silence.
async fn carry(
    mut client: TcpStream,
    target: String,
    mode: LinkMode,
    mut modes: watch::Receiver<LinkMode>,
) {
    if mode == LinkMode::Open {
        let Ok(mut upstream) = TcpStream::connect(&target).await else {
            return;
        };
        let cut = async {
            loop {
                if modes.changed().await.is_err() || *modes.borrow() != LinkMode::Open {
                    return;
                }
            }
        };
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => return,
            _ = cut => {}
        }
        if *modes.borrow() == LinkMode::Refusing {
            return;
        }
    }
    // Silent: take what comes, answer nothing.
    let mut sink = [0u8; 4096];
    loop {
        tokio::select! {
            read = client.read(&mut sink) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            changed = modes.changed() => {
                if changed.is_err() || *modes.borrow() != LinkMode::Blackhole {
                    return;
                }
            }
        }
    }
}
