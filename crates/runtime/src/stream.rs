//! Streams: ordered queues of device work. The host "stream" runs everything at once.

use std::sync::Arc;

use cudarc::driver::CudaStream;

use crate::cuda::CudaDevice;
use crate::{Device, Error, Result};

#[derive(Clone, Debug)]
pub enum Stream {
    Host,
    Cuda { device: Arc<CudaDevice>, stream: Arc<CudaStream> },
}

impl PartialEq for Stream {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Stream::Host, Stream::Host) => true,
            (Stream::Cuda { stream: a, .. }, Stream::Cuda { stream: b, .. }) => a.cu_stream() == b.cu_stream(),
            _ => false,
        }
    }
}

impl Stream {
    /// The stream a device uses unless told otherwise.
    pub fn default_for(device: &Device) -> Stream {
        match device {
            Device::Cpu => Stream::Host,
            Device::Cuda(d) => Stream::Cuda { device: d.clone(), stream: d.stream.clone() },
        }
    }

    /// A new independent stream on `device`.
    pub fn new_on(device: &Device) -> Result<Stream> {
        match device {
            Device::Cpu => Ok(Stream::Host),
            Device::Cuda(d) => {
                d.bind()?;
                let stream = d.ctx.new_stream().map_err(Error::cuda("cuStreamCreate"))?;
                Ok(Stream::Cuda { device: d.clone(), stream })
            }
        }
    }

    pub fn device(&self) -> Device {
        match self {
            Stream::Host => Device::Cpu,
            Stream::Cuda { device, .. } => Device::Cuda(device.clone()),
        }
    }

    /// Blocks until all work queued on this stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        match self {
            Stream::Host => Ok(()),
            Stream::Cuda { device, stream } => {
                crate::cuda::forbid_in_capture("waiting for the stream")?;
                device.bind()?;
                stream.synchronize().map_err(Error::cuda("cuStreamSynchronize"))
            }
        }
    }

    /// Work queued on `self` from now on starts after all work queued on `other` so far.
    pub fn wait_for(&self, other: &Stream) -> Result<()> {
        match (self, other) {
            (_, Stream::Host) => Ok(()),
            (Stream::Host, s) => s.synchronize(),
            (Stream::Cuda { device, stream }, Stream::Cuda { device: od, stream: other }) => {
                if stream.cu_stream() == other.cu_stream() {
                    return Ok(());
                }
                od.bind()?;
                let event = other.record_event(None).map_err(Error::cuda("cuEventRecord"))?;
                device.bind()?;
                stream.wait(&event).map_err(Error::cuda("cuStreamWaitEvent"))
            }
        }
    }

    /// Makes a foreign CUDA stream (a DLPack consumer's handle; 1 and 2 are the legacy and
    /// per-thread default streams) wait for the work queued here so far.
    pub fn make_wait(&self, foreign: u64) -> Result<()> {
        let Stream::Cuda { device, stream } = self else {
            return Ok(());
        };
        device.bind()?;
        let event = stream.record_event(None).map_err(Error::cuda("cuEventRecord"))?;
        // SAFETY: the consumer promises `foreign` is a live stream of this device's context;
        // the event stays alive until the call returns (CUDA defers its destruction).
        unsafe { cudarc::driver::sys::cuStreamWaitEvent(foreign as cudarc::driver::sys::CUstream, event.cu_event(), 0) }
            .result()
            .map_err(Error::cuda("cuStreamWaitEvent"))
    }

    /// The raw CUDA stream handle (null for the host).
    pub fn cu_stream(&self) -> u64 {
        match self {
            Stream::Host => 0,
            Stream::Cuda { stream, .. } => stream.cu_stream() as u64,
        }
    }

    pub(crate) fn cuda(&self) -> Option<(&Arc<CudaDevice>, &Arc<CudaStream>)> {
        match self {
            Stream::Host => None,
            Stream::Cuda { device, stream } => Some((device, stream)),
        }
    }
}
