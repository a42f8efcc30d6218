//! QMP, QEMU's machine protocol, on each guest's unix socket (the `qapi` crate's typed
//! commands): whether the guest runs, a graceful ACPI power-down, and quit. Each call is one
//! short connection with a deadline, made on a blocking thread.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use qapi::{qmp, Qmp};

/// How long one QMP exchange may take: QEMU answers at once, or is wedged.
const DEADLINE: Duration = Duration::from_secs(3);

fn call<T: Send + 'static>(
    socket: &Path,
    f: impl FnOnce(
            &mut Qmp<qapi::Stream<std::io::BufReader<&UnixStream>, &UnixStream>>,
        ) -> Result<T, qapi::ExecuteError>
        + Send
        + 'static,
) -> std::io::Result<T> {
    let stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(DEADLINE))?;
    stream.set_write_timeout(Some(DEADLINE))?;
    let mut qmp = Qmp::from_stream(&stream);
    qmp.handshake().map_err(std::io::Error::from)?;
    f(&mut qmp).map_err(std::io::Error::from)
}

async fn blocking<T: Send + 'static>(
    socket: &Path,
    f: impl FnOnce(&Path) -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    let socket: PathBuf = socket.to_path_buf();
    tokio::task::spawn_blocking(move || f(&socket))
        .await
        .map_err(std::io::Error::other)?
}

/// The guest's run state (`query-status`), e.g. "running", "paused", "shutdown".
pub async fn status(socket: &Path) -> std::io::Result<(bool, String)> {
    blocking(socket, |s| {
        call(s, |q| {
            let info = q.execute(&qmp::query_status {})?;
            Ok((info.running, format!("{:?}", info.status).to_lowercase()))
        })
    })
    .await
}

/// Asks the guest to power down (ACPI), as pressing its power button.
pub async fn powerdown(socket: &Path) -> std::io::Result<()> {
    blocking(socket, |s| {
        call(s, |q| q.execute(&qmp::system_powerdown {}).map(|_| ()))
    })
    .await
}

/// Ends QEMU at once.
pub async fn quit(socket: &Path) -> std::io::Result<()> {
    blocking(socket, |s| {
        call(s, |q| q.execute(&qmp::quit {}).map(|_| ()))
    })
    .await
}
