//! What a VM asks its node to run (an OCI image, a command, a kernel or disk image to boot, or
//! none of them) and the rules the schemas cannot state: an image is pulled from its registry,
//! so it needs `network: true` (smolvm refuses the create otherwise, `docs/interop.md`), a VM
//! boots from one source at most, and only a runtime that runs that kind of workload may take it
//! (placement, `docs/controller.md`).

use fleetwire_types::{JsonPointer, Violation};

use crate::runtimes::Runtime;

/// The shape of a workload, as far as choosing a runtime goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload {
    pub image: bool,
    pub command: bool,
    /// A kernel (`boot`) or a disk image (`disk_image`) to boot: a whole machine (qemu).
    pub machine: bool,
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.machine {
            return f.write_str("a kernel or disk image to boot");
        }
        f.write_str(match (self.image, self.command) {
            (true, true) => "an image with a command",
            (true, false) => "an image",
            (false, true) => "a command without an image",
            (false, false) => "neither an image nor a command",
        })
    }
}

/// Why a runtime cannot run a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WrongRuntime {
    #[error("its runtime (process) runs commands, not images")]
    ProcessGivenImage,
    #[error(
        "its runtime (smolvm) boots images and runs a command only inside one; this request has a command and no image"
    )]
    SmolvmGivenCommandOnly,
    #[error("only a qemu runtime boots a kernel or a disk image")]
    MachineNeedsQemu,
    #[error("its runtime (qemu) boots kernels and disk images, not OCI images or bare commands")]
    QemuGivenImageOrCommand,
}

/// Whether a node whose runtime is `runtime` can run `workload`; the reason when not.
/// `smolvm` boots images (a command only overrides the image's own); `process` runs a command
/// on the host and has no image to boot; `qemu` boots a kernel or a disk image and nothing
/// else. A workload with none of them is left to the node (PPN nodes choose by `vm_type`; the
/// process driver runs its `VM_DEFAULT_COMMAND`, the qemu driver boots `VM_BASE_IMAGE`).
/// A runtime this build does not drive (`None`) is the node's own business, like a workload
/// with neither.
pub fn runtime_runs(runtime: Option<Runtime>, workload: Workload) -> Result<(), WrongRuntime> {
    match runtime {
        Some(Runtime::Qemu) if workload.image || workload.command => {
            Err(WrongRuntime::QemuGivenImageOrCommand)
        }
        Some(Runtime::Process | Runtime::Smolvm) if workload.machine => {
            Err(WrongRuntime::MachineNeedsQemu)
        }
        Some(Runtime::Process) if workload.image => Err(WrongRuntime::ProcessGivenImage),
        Some(Runtime::Smolvm) if workload.command && !workload.image => {
            Err(WrongRuntime::SmolvmGivenCommandOnly)
        }
        _ => Ok(()),
    }
}

fn violation(pointer: String, keyword: &str, message: String) -> Violation {
    Violation {
        instance_path: pointer.parse::<JsonPointer>().expect("a JSON pointer"),
        schema_path: "".parse::<JsonPointer>().expect("the empty pointer"),
        keyword: keyword.to_string(),
        message,
    }
}

/// `at` is the pointer of the object holding `image` and `network` ("" for the whole body).
pub fn image_network(at: &str, image: Option<&str>, network: bool) -> Option<Violation> {
    let image = image?;
    (!network).then(|| {
        violation(
            format!("{at}/network"),
            "imageNeedsNetwork",
            format!(
                "image {image:?} is pulled from its registry, which needs network access: set network to true"
            ),
        )
    })
}

/// `at` is the pointer of a checkpoint to restore: its `engine_version` must be a version the
/// placement can compare. The schema's `SemVer` pattern is looser than SemVer 2.0 (it lets
/// through empty identifiers such as `1.2.3+.x`, and numbers past 64 bits), so what passed it
/// can still be no version.
pub fn checkpoint_engine_version(at: &str, version: &str) -> Option<Violation> {
    semver::Version::parse(version).err().map(|error| {
        violation(
            format!("{at}/engine_version"),
            "semver",
            format!("{version:?} is not a SemVer 2.0 version: {error}"),
        )
    })
}

/// `at` is the pointer of a desired instance: it must name a command, an image (with or
/// without a command), a kernel (`boot`) or a disk image.
pub fn command_or_image(at: &str, workload: Workload) -> Option<Violation> {
    (!workload.image && !workload.command && !workload.machine).then(|| {
        violation(
            at.to_string(),
            "commandOrImage",
            "an instance needs a command, an image (or both), a boot kernel or a disk image".into(),
        )
    })
}

/// `at` is the pointer of the object holding the boot sources (`image`, `boot` and the disk
/// image, whose member name differs between the API and desired.json): a VM boots from one.
pub fn one_boot_source(
    at: &str,
    image: bool,
    boot: bool,
    disk_image: Option<&str>,
) -> Option<Violation> {
    let named: Vec<&str> = [image.then_some("image"), boot.then_some("boot"), disk_image]
        .into_iter()
        .flatten()
        .collect();
    (named.len() > 1).then(|| {
        violation(
            format!("{at}/{}", named[1]),
            "oneBootSource",
            format!(
                "a VM boots from one source; this one names {}",
                named.join(" and ")
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_runtime_takes_what_it_can_run() {
        let w = |image, command| Workload {
            image,
            command,
            machine: false,
        };
        let machine = Workload {
            image: false,
            command: false,
            machine: true,
        };
        assert!(runtime_runs(Some(Runtime::Qemu), machine).is_ok());
        assert!(runtime_runs(Some(Runtime::Qemu), w(false, false)).is_ok());
        assert!(runtime_runs(Some(Runtime::Qemu), w(true, false)).is_err());
        assert!(runtime_runs(Some(Runtime::Qemu), w(false, true)).is_err());
        assert!(runtime_runs(Some(Runtime::Smolvm), machine).is_err());
        assert!(runtime_runs(Some(Runtime::Process), machine).is_err());
        assert!(runtime_runs(Some(Runtime::Smolvm), w(true, false)).is_ok());
        assert!(runtime_runs(Some(Runtime::Smolvm), w(true, true)).is_ok());
        assert!(runtime_runs(Some(Runtime::Smolvm), w(false, true)).is_err());
        assert!(runtime_runs(Some(Runtime::Process), w(false, true)).is_ok());
        assert!(runtime_runs(Some(Runtime::Process), w(true, false)).is_err());
        assert!(runtime_runs(Some(Runtime::Process), w(true, true)).is_err());
        assert!(runtime_runs(Some(Runtime::Smolvm), w(false, false)).is_ok());
        assert!(runtime_runs(Some(Runtime::Process), w(false, false)).is_ok());
    }

    #[test]
    fn an_image_without_network_is_refused_at_its_pointer() {
        let v = image_network("/instances/2", Some("alpine:3.20"), false).unwrap();
        assert_eq!(v.instance_path.as_str(), "/instances/2/network");
        assert!(v.message.contains("network"), "{}", v.message);
        assert!(image_network("", Some("alpine:3.20"), true).is_none());
        assert!(image_network("", None, false).is_none());
        let w = |image, command, machine| Workload {
            image,
            command,
            machine,
        };
        assert!(command_or_image("/instances/0", w(false, false, false)).is_some());
        assert!(command_or_image("/instances/0", w(true, false, false)).is_none());
        assert!(command_or_image("/instances/0", w(false, false, true)).is_none());
    }

    #[test]
    fn two_boot_sources_are_refused_at_the_second() {
        let v = one_boot_source("/instances/1", true, true, None).unwrap();
        assert_eq!(v.instance_path.as_str(), "/instances/1/boot");
        let v = one_boot_source("", false, true, Some("disk_image")).unwrap();
        assert_eq!(v.instance_path.as_str(), "/disk_image");
        assert!(v.message.contains("boot and disk_image"), "{}", v.message);
        assert!(one_boot_source("", false, true, None).is_none());
        assert!(one_boot_source("", false, false, Some("diskImage")).is_none());
    }
}
