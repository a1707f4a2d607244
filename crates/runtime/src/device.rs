//! Where memory lives and work runs: the host CPU or one CUDA device.

use std::sync::Arc;

use crate::cuda::{CudaDevice, cuda_device};
use crate::{Error, Result};

#[derive(Clone, Debug)]
pub enum Device {
    Cpu,
    Cuda(Arc<CudaDevice>),
}

/// Memory figures a device reports (`Device.stats` in Python).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    pub free_memory: u64,
    pub total_memory: u64,
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Device::Cpu, Device::Cpu) => true,
            (Device::Cuda(a), Device::Cuda(b)) => a.ordinal == b.ordinal,
            _ => false,
        }
    }
}
impl Eq for Device {}

impl Device {
    /// The accelerator with this id; an error that says why when there is none.
    pub fn accelerator(id: i64) -> Result<Device> {
        if id < 0 {
            return Err(Error::Value(format!("accelerator id must be >= 0, got {id}")));
        }
        Ok(Device::Cuda(cuda_device(id as usize)?))
    }

    pub fn is_host(&self) -> bool {
        matches!(self, Device::Cpu)
    }

    /// "cpu" or "gpu".
    pub fn label(&self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Cuda(_) => "gpu",
        }
    }

    /// "cpu" or "cuda".
    pub fn api(&self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Cuda(_) => "cuda",
        }
    }

    pub fn id(&self) -> usize {
        match self {
            Device::Cpu => 0,
            Device::Cuda(d) => d.ordinal,
        }
    }

    /// `sm_90a` and the like; the CPU has none.
    pub fn architecture_name(&self) -> Result<String> {
        match self {
            Device::Cpu => Err(Error::Value("the CPU device has no architecture name".into())),
            Device::Cuda(d) => Ok(d.arch.clone()),
        }
    }

    pub fn cuda(&self) -> Option<&Arc<CudaDevice>> {
        match self {
            Device::Cpu => None,
            Device::Cuda(d) => Some(d),
        }
    }

    pub fn synchronize(&self) -> Result<()> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(d) => d.synchronize(),
        }
    }

    /// Whether this device can read and write `other`'s memory directly.
    pub fn can_access(&self, other: &Device) -> Result<bool> {
        match (self, other) {
            (Device::Cuda(a), Device::Cuda(b)) => a.can_access_peer(b),
            _ => Ok(false),
        }
    }

    pub fn stats(&self) -> Result<DeviceStats> {
        match self {
            Device::Cpu => Ok(host_memory()),
            Device::Cuda(d) => {
                let (free, total) = d.memory_info()?;
                Ok(DeviceStats { free_memory: free as u64, total_memory: total as u64 })
            }
        }
    }
}

/// MemAvailable / MemTotal from /proc/meminfo (zeros where that file does not exist).
fn host_memory() -> DeviceStats {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    DeviceStats { free_memory: field("MemAvailable:"), total_memory: field("MemTotal:") }
}
