//! CPU idle states off, for as long as a guard lives: the kernel's PM QoS request
//! through `/dev/cpu_dma_latency` (Documentation/power/pm_qos_interface.rst).
//!
//! Tales of the Tail (§4.6) lists CPU power saving among the sources of excess tail: a
//! request that lands on an idle CPU waits for it to wake. On the VMs this project runs
//! on, waking a thread on another, idle vCPU costs ~22 µs, on another busy one 13–14 µs,
//! on the same CPU 2.6 µs (`benches/wakeup_cost.c`, docs/demo.md). Writing 0 to
//! `/dev/cpu_dma_latency` asks for no exit latency, so idle CPUs poll instead of halting
//! (a polling CPU also needs no IPI to notice a wake-up: 2.8 µs across CPUs here); the
//! cost is power (on a VM, host CPU). It does not make IPIs to busy CPUs cheaper, which
//! is why it did not lower the kernel backend's cost at high load (docs/demo.md).
//!
//! Fail-safe by construction: the kernel keeps the request only while the file stays
//! open, so a crash, a kill or a dropped guard all restore the previous behaviour. No
//! journal entry is needed and nothing is left behind.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The PM QoS device the guard holds.
pub const CPU_DMA_LATENCY: &str = "/dev/cpu_dma_latency";

/// Why the PM QoS request cannot be made or read; every variant names the device.
#[derive(Debug, thiserror::Error)]
pub enum IdleError {
    /// The device cannot be opened for writing (not root, or no such device).
    #[error(
        "{}: {source} (root is needed to hold CPU idle states off; drop --idle-states off to run without)",
        .path.display()
    )]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The device refused the request.
    #[error("{}: cannot write the request: {source}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The current target cannot be read.
    #[error("{}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Keeps CPU idle states at zero exit latency until dropped.
#[derive(Debug)]
pub struct IdleStatesOff {
    /// Held open: closing it withdraws the request.
    _request: File,
    path: PathBuf,
}

impl IdleStatesOff {
    /// Asks the kernel for zero idle exit latency on every CPU.
    pub fn hold() -> Result<IdleStatesOff, IdleError> {
        IdleStatesOff::hold_at(Path::new(CPU_DMA_LATENCY))
    }

    fn hold_at(path: &Path) -> Result<IdleStatesOff, IdleError> {
        let mut f = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|source| IdleError::Open { path: path.to_path_buf(), source })?;
        // The device takes a binary s32 (µs); 0 = poll, never enter a deeper idle state.
        f.write_all(&0i32.to_ne_bytes()).map_err(|source| IdleError::Write { path: path.to_path_buf(), source })?;
        Ok(IdleStatesOff { _request: f, path: path.to_path_buf() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The latency target the kernel enforces now, µs (`i32::MAX`-ish = no request held).
pub fn current_target_us() -> Result<i32, IdleError> {
    let read = |source| IdleError::Read { path: PathBuf::from(CPU_DMA_LATENCY), source };
    let mut f = File::open(CPU_DMA_LATENCY).map_err(read)?;
    let mut b = [0u8; 4];
    f.read_exact(&mut b).map_err(read)?;
    Ok(i32::from_ne_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_holds_while_the_guard_lives_and_goes_with_it() {
        let Ok(before) = current_target_us() else {
            eprintln!("skipped: {CPU_DMA_LATENCY} is not readable here");
            return;
        };
        let guard = match IdleStatesOff::hold() {
            Ok(g) => g,
            Err(e) => {
                eprintln!("skipped: {e}");
                return;
            }
        };
        assert_eq!(current_target_us().unwrap(), 0, "held at {}", guard.path().display());
        drop(guard);
        // Another holder (another test binary, tuned) may keep its own request; ours is gone.
        assert_eq!(current_target_us().unwrap(), before, "the target is back to what it was");
    }

    #[test]
    fn a_missing_device_names_the_file_and_the_fix() {
        let e = IdleStatesOff::hold_at(Path::new("/nonexistent/cpu_dma_latency")).unwrap_err();
        assert!(
            matches!(&e, IdleError::Open { path, source }
                if path == Path::new("/nonexistent/cpu_dma_latency") && source.kind() == std::io::ErrorKind::NotFound),
            "{e:?}"
        );
        let e = e.to_string();
        assert!(e.contains("/nonexistent/cpu_dma_latency") && e.contains("--idle-states"), "{e}");
    }
}
