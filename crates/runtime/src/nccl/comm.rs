//! NCCL communicators and the watchdog that keeps collectives from hanging.
//!
//! One communicator per ordered list of GPUs, made once per process with `ncclCommInitAll`
//! (every rank in this process; rank `i` is the i-th GPU of the list) under a timeout. Each
//! collective records an event on every stream it used and hands them to the watchdog thread,
//! which polls them: when they have not all completed within `nccl.timeout_s`, or NCCL reports
//! an asynchronous error, it aborts the communicator (which ends its kernels), and every later
//! collective on it fails with the reason instead of waiting forever.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cudarc::driver::{CudaEvent, sys};

use super::api::{self, Api, Comm};
use crate::cuda::CudaDevice;
use crate::{Error, Result};

/// The ranks of one communicator, in device order.
pub struct Comms {
    pub devices: Vec<Arc<CudaDevice>>,
    /// Held while a collective is enqueued: a communicator takes one call at a time, and
    /// models may execute from several threads.
    pub enqueue: Mutex<()>,
    comms: Vec<Comm>,
    failed: AtomicBool,
    why: Mutex<String>,
}

// SAFETY: NCCL communicators may be used from any thread; calls are serialised by `enqueue`,
// and the watchdog's abort may run concurrently, which NCCL allows.
unsafe impl Send for Comms {}
unsafe impl Sync for Comms {}

impl Comms {
    pub fn rank(&self, i: usize) -> Comm {
        self.comms[i]
    }

    /// An error when the watchdog has aborted this communicator.
    pub fn check_alive(&self) -> Result<()> {
        if self.failed.load(Ordering::Acquire) {
            let why = self.why.lock().unwrap_or_else(|p| p.into_inner()).clone();
            return Err(Error::Device(format!("NCCL communicator of {} was aborted: {why}", self.label())));
        }
        Ok(())
    }

    pub fn label(&self) -> String {
        let ids: Vec<String> = self.devices.iter().map(|d| d.ordinal.to_string()).collect();
        format!("gpu:{}", ids.join(","))
    }

    fn abort(&self, api: &Api, why: String) {
        if self.failed.swap(true, Ordering::AcqRel) {
            return;
        }
        *self.why.lock().unwrap_or_else(|p| p.into_inner()) = why;
        for &c in &self.comms {
            // SAFETY: a live communicator; abort may run while its kernels are in flight.
            unsafe { (api.comm_abort)(c) };
        }
        forget(self);
    }
}

type Key = Vec<usize>;

fn registry() -> &'static Mutex<HashMap<Key, Arc<Comms>>> {
    static MAP: OnceLock<Mutex<HashMap<Key, Arc<Comms>>>> = OnceLock::new();
    MAP.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Drops an aborted communicator from the registry, so the next collective makes a new one.
fn forget(comms: &Comms) {
    let key: Key = comms.devices.iter().map(|d| d.ordinal).collect();
    let mut map = registry().lock().unwrap_or_else(|p| p.into_inner());
    if map.get(&key).is_some_and(|c| std::ptr::eq(Arc::as_ptr(c), comms)) {
        map.remove(&key);
    }
}

fn timeout() -> Duration {
    Duration::from_secs(max_tuning::current().int(max_tuning::Knob::NcclTimeoutS).unwrap_or(120) as u64)
}

/// The communicator of `devices` (in this order), made on first use.
pub fn comms_for(devices: &[Arc<CudaDevice>]) -> Result<Arc<Comms>> {
    let key: Key = devices.iter().map(|d| d.ordinal).collect();
    if let Some(c) = registry().lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(c.clone());
    }
    let api = api::api()?;
    // NVLink multicast (NVLS) is off on the shared machines; NCCL reads this when a
    // communicator is made, so it is set before the first one unless the user set it.
    static NVLS: OnceLock<()> = OnceLock::new();
    NVLS.get_or_init(|| {
        if std::env::var_os("NCCL_NVLS_ENABLE").is_none() {
            // SAFETY: set once, under OnceLock, before NCCL (the only reader) initialises.
            unsafe { std::env::set_var("NCCL_NVLS_ENABLE", "0") };
        }
    });
    let ordinals: Vec<i32> = devices.iter().map(|d| d.ordinal as i32).collect();
    let (tx, rx) = channel();
    // ncclCommInitAll sets up every rank; it runs on a thread of its own so that a stuck
    // initialisation becomes an error after the timeout instead of a hang.
    std::thread::spawn(move || {
        let mut comms: Vec<usize> = vec![0; ordinals.len()];
        // SAFETY: room for one communicator per device; the list holds valid ordinals.
        let status =
            unsafe { (api.comm_init_all)(comms.as_mut_ptr() as *mut Comm, ordinals.len() as i32, ordinals.as_ptr()) };
        let _ = tx.send((status, comms));
    });
    let label = format!("gpu:{}", key.iter().map(|o| o.to_string()).collect::<Vec<_>>().join(","));
    let (status, raw) = rx.recv_timeout(timeout()).map_err(|_| {
        Error::Device(format!("NCCL: making the communicator of {label} did not finish within {:?}", timeout()))
    })?;
    api.check(&format!("ncclCommInitAll({label}) of NCCL {}", api.version_text()), status)?;
    let comms = Arc::new(Comms {
        devices: devices.to_vec(),
        enqueue: Mutex::new(()),
        comms: raw.into_iter().map(|c| c as Comm).collect(),
        failed: AtomicBool::new(false),
        why: Mutex::new(String::new()),
    });
    registry().lock().unwrap_or_else(|p| p.into_inner()).insert(key, comms.clone());
    Ok(comms)
}

/// One collective in flight: the events recorded after it on each stream.
pub struct Pending {
    pub comms: Arc<Comms>,
    pub events: Vec<(Arc<CudaDevice>, CudaEvent)>,
    pub what: &'static str,
}

// SAFETY: events are queried from the watchdog thread with their context bound.
unsafe impl Send for Pending {}

/// Hands a launched collective to the watchdog.
pub fn watch(p: Pending) {
    static TX: OnceLock<Mutex<Sender<Pending>>> = OnceLock::new();
    let tx = TX.get_or_init(|| {
        let (tx, rx) = channel();
        std::thread::Builder::new().name("nccl-watchdog".into()).spawn(move || watchdog(rx)).ok();
        Mutex::new(tx)
    });
    let _ = tx.lock().unwrap_or_else(|p| p.into_inner()).send(p);
}

fn done(events: &[(Arc<CudaDevice>, CudaEvent)]) -> bool {
    events.iter().all(|(dev, ev)| {
        if dev.bind().is_err() {
            return true;
        }
        // SAFETY: a live event of this device's context, which is bound.
        let status = unsafe { sys::cuEventQuery(ev.cu_event()) };
        status != sys::CUresult::CUDA_ERROR_NOT_READY
    })
}

fn watchdog(rx: Receiver<Pending>) {
    let Ok(api) = api::api() else { return };
    let mut pending: Vec<(Pending, Instant)> = Vec::new();
    loop {
        if pending.is_empty() {
            match rx.recv() {
                Ok(p) => pending.push((p, Instant::now())),
                Err(_) => return,
            }
        }
        while let Ok(p) = rx.try_recv() {
            pending.push((p, Instant::now()));
        }
        let limit = timeout();
        pending.retain(|(p, since)| {
            if p.comms.failed.load(Ordering::Acquire) || done(&p.events) {
                return false;
            }
            for (i, &c) in p.comms.comms.iter().enumerate() {
                let mut status = api::SUCCESS;
                // SAFETY: a live communicator and a valid out-pointer.
                unsafe { (api.comm_get_async_error)(c, &mut status) };
                if status != api::SUCCESS && status != api::IN_PROGRESS {
                    let why = format!("{} on rank {i}: {}", p.what, api.describe(status));
                    p.comms.abort(api, why);
                    return false;
                }
            }
            if since.elapsed() > limit {
                p.comms.abort(api, format!("{} did not finish within {limit:?}", p.what));
                return false;
            }
            true
        });
        std::thread::sleep(Duration::from_millis(1));
    }
}
