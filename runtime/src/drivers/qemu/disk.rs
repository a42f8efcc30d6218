//! A guest's files: the kernel, initrd or base image it names in the node's image directory
//! (checked before QEMU is started, so a missing one is named in the VM's message), its qcow2
//! overlay on the base image (made with `qemu-img`) and its cloud-init NoCloud seed (made with
//! `genisoimage`, as PPN's host agent makes it).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A file of the image directory a guest needs: `what` says which ("kernel", "base image").
pub fn image_file(image_dir: &Path, what: &str, name: &str) -> Result<PathBuf, String> {
    let path = image_dir.join(name);
    let real = path.canonicalize().map_err(|e| {
        format!(
            "the {what} {name:?} is not in the image directory {} (VM_IMAGE_DIR): {e}",
            image_dir.display()
        )
    })?;
    // The schema keeps '/' out of names; a symbolic link could still lead out.
    let dir = image_dir.canonicalize().map_err(|e| {
        format!(
            "the image directory {} (VM_IMAGE_DIR): {e}",
            image_dir.display()
        )
    })?;
    if !real.starts_with(&dir) {
        return Err(format!(
            "the {what} {name:?} leads out of the image directory {} (to {})",
            image_dir.display(),
            real.display()
        ));
    }
    if !real.is_file() {
        return Err(format!(
            "the {what} {name:?} in {} is not a file",
            image_dir.display()
        ));
    }
    Ok(real)
}

pub(super) fn run(mut cmd: Command, what: &str) -> Result<(), String> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: could not run {program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what}: {program} {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The VM's copy-on-write overlay on `base` (kept when it exists: a cold boot keeps the disk).
pub fn ensure_overlay(base: &Path, overlay: &Path) -> Result<(), String> {
    if overlay.exists() {
        return Ok(());
    }
    let format = base_format(base)?;
    let partial = overlay.with_extension("qcow2.partial");
    let mut cmd = Command::new("qemu-img");
    cmd.args(["create", "-q", "-f", "qcow2", "-F", &format, "-b"])
        .arg(base)
        .arg(&partial);
    run(cmd, "the VM's overlay")?;
    std::fs::rename(&partial, overlay).map_err(|e| format!("the VM's overlay: {e}"))
}

/// The base image's format, as `qemu-img info` reads it (an overlay must name it).
fn base_format(base: &Path) -> Result<String, String> {
    // -U: other guests' QEMUs may hold the base image open.
    let out = Command::new("qemu-img")
        .args(["info", "-U", "--output=json"])
        .arg(base)
        .output()
        .map_err(|e| format!("the base image: could not run qemu-img: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "the base image {}: {}",
            base.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let info: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("the base image: qemu-img info: {e}"))?;
    info["format"].as_str().map(str::to_string).ok_or_else(|| {
        format!(
            "the base image {}: qemu-img names no format",
            base.display()
        )
    })
}

/// The NoCloud seed: the VM's hostname, and the node's SSH key for the default user.
pub fn write_seed(
    seed: &Path,
    instance_id: &str,
    hostname: &str,
    ssh_pubkey: Option<&str>,
) -> Result<(), String> {
    // Its two files are staged beside it, in `cidata/`.
    let dir = seed.with_file_name("cidata");
    std::fs::create_dir_all(&dir).map_err(|e| format!("the cloud-init seed: {e}"))?;
    let meta = format!("instance-id: {instance_id}\nlocal-hostname: {hostname}\n");
    let mut user = format!("#cloud-config\nhostname: {hostname}\n");
    if let Some(key) = ssh_pubkey {
        // JSON strings are YAML scalars: the key is quoted whatever it holds.
        user.push_str(&format!(
            "ssh_authorized_keys:\n  - {}\n",
            serde_json::Value::from(key.trim())
        ));
    }
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).map_err(|e| format!("the cloud-init seed: {e}"))
    };
    write("meta-data", &meta)?;
    write("user-data", &user)?;
    let partial = seed.with_extension("iso.partial");
    let mut cmd = Command::new("genisoimage");
    cmd.args(["-quiet", "-output"])
        .arg(&partial)
        .args(["-volid", "cidata", "-joliet", "-rock"])
        .arg(dir.join("user-data"))
        .arg(dir.join("meta-data"));
    run(cmd, "the cloud-init seed")?;
    std::fs::rename(&partial, seed).map_err(|e| format!("the cloud-init seed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_escaping_image_file_is_named() {
        let root = tempfile::tempdir().unwrap();
        let images = root.path().join("images");
        std::fs::create_dir(&images).unwrap();
        std::fs::write(images.join("vmlinuz"), b"k").unwrap();
        std::fs::write(root.path().join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink(root.path().join("secret"), images.join("link")).unwrap();

        assert_eq!(
            image_file(&images, "kernel", "vmlinuz").unwrap(),
            images.join("vmlinuz").canonicalize().unwrap()
        );
        let missing = image_file(&images, "initrd", "initrd.img").unwrap_err();
        assert!(
            missing.contains("initrd \"initrd.img\"") && missing.contains("VM_IMAGE_DIR"),
            "{missing}"
        );
        let out = image_file(&images, "kernel", "link").unwrap_err();
        assert!(out.contains("leads out of the image directory"), "{out}");
    }

    /// Needs qemu-img and genisoimage (qemu-utils, genisoimage); skipped without them.
    #[test]
    fn an_overlay_and_a_seed_are_made_with_the_real_tools() {
        let have = |p: &str| Command::new(p).arg("--version").output().is_ok();
        if !have("qemu-img") || !have("genisoimage") {
            eprintln!(
                "skipped: needs qemu-img and genisoimage (apt-get install qemu-utils genisoimage)"
            );
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base.qcow2");
        let status = Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2"])
            .arg(&base)
            .arg("64M")
            .status()
            .unwrap();
        assert!(status.success());
        let overlay = dir.path().join("disk.qcow2");
        ensure_overlay(&base, &overlay).unwrap();
        let info = Command::new("qemu-img")
            .args(["info", "--output=json"])
            .arg(&overlay)
            .output()
            .unwrap();
        let info: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
        assert_eq!(info["format"], "qcow2");
        assert_eq!(info["backing-filename"], base.display().to_string());

        let seed = dir.path().join("seed.iso");
        write_seed(&seed, "vm-1", "web", Some("ssh-ed25519 AAAA test@host")).unwrap();
        let iso = std::fs::read(&seed).unwrap();
        // ISO 9660: the primary volume descriptor at 32 KiB names the volume "cidata".
        assert_eq!(&iso[32769..32774], b"CD001");
        assert_eq!(&iso[32808..32814], b"cidata");
        let text = String::from_utf8_lossy(&iso);
        assert!(text.contains("local-hostname: web"), "meta-data");
        assert!(text.contains("\"ssh-ed25519 AAAA test@host\""), "user-data");
    }
}
