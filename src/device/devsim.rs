//! Emulated storage (`-o devsim=ram|array|sata`): a latency model wrapped
//! around any block device, so that the slow-device half of a bdelay A/B
//! runs on a ramdisk image.
//!
//! Every request costs `req_us`, plus its length at `mb_s`, plus — when it
//! does not start where the previous request ended and the model has a
//! positional cost — a seek growing with the square root of the distance
//! (`seek_min_us` next door to `seek_max_us` across the whole device) and
//! half a rotation at `rpm`. A request that does start where the previous
//! one ended, but only after the disk sat idle, waits for its sector to come
//! round again: a commit block written after its log blocks completed costs
//! most of a rotation, as on a disk without write cache, while requests
//! queued back to back stream. Like a disk with a command queue, which
//! serves the nearest queued request first, a request admitted behind `q`
//! others pays `1/(q+1)` of its seek distance and rotational wait: a deep
//! queue makes positioning cheap. A flush waits for every request in service,
//! then costs `flush_us`. `servers` requests are in service at once (0: no
//! limit); the others queue in arrival order. Each request returns when the
//! model says it completes, measured on one clock from the device's
//! creation, so queueing delays add up as on a real device.
//!
//! Parameters are overridden after the model's name, separated by colons:
//! `devsim=sata:flush_us=8000:seek_max_us=12000` (colons, because commas
//! separate mount options).

use std::fmt;
use std::io::{self, IoSlice};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::BlockDevice;

/// A device model's parameters; see the module comment for their meaning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevSimParams {
    pub model: String,
    pub servers: u32,
    pub req_us: u32,
    /// Transfer rate; 0 means transfers take no time.
    pub mb_s: u32,
    pub flush_us: u32,
    pub seek_min_us: u32,
    pub seek_max_us: u32,
    /// 0 means no rotational latency.
    pub rpm: u32,
}

/// The models, with their default parameters.
///
/// - `ram`: no added cost; the backing store's own speed (an image in
///   /dev/shm), with unlimited concurrency.
/// - `array`: a midrange array with a battery-backed write cache: a fixed
///   per-request latency, two requests in service at once (the controller),
///   flushes as cheap as a request.
/// - `sata`: one 7200 rpm disk without write cache: one request at a time,
///   seeks and rotational latency, ~70 MB/s media rate.
const MODELS: &[(&str, [u32; 7])] = &[
    // name     servers req  mb_s flush seek_min seek_max rpm
    ("ram", [0, 0, 0, 0, 0, 0, 0]),
    ("array", [2, 300, 200, 300, 0, 0, 0]),
    ("sata", [1, 100, 70, 100, 800, 16_000, 7200]),
];

const PARAM_NAMES: [&str; 7] = [
    "servers",
    "req_us",
    "mb_s",
    "flush_us",
    "seek_min_us",
    "seek_max_us",
    "rpm",
];

impl DevSimParams {
    /// Parses `MODEL[:name=value]...`.
    pub fn parse(spec: &str) -> Result<DevSimParams, String> {
        let mut parts = spec.split(':');
        let name = parts.next().unwrap_or("");
        let (_, defaults) = MODELS.iter().find(|(n, _)| *n == name).ok_or_else(|| {
            format!("unknown device model \"{name}\": expected ram, array or sata")
        })?;
        let mut values = *defaults;
        for part in parts {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("\"{part}\" is not name=value"))?;
            let slot = PARAM_NAMES.iter().position(|n| *n == key).ok_or_else(|| {
                format!(
                    "unknown device model parameter \"{key}\": expected one of {}",
                    PARAM_NAMES.join(", ")
                )
            })?;
            values[slot] = value
                .parse()
                .map_err(|_| format!("{key}={value}: expected a non-negative integer"))?;
        }
        let [servers, req_us, mb_s, flush_us, seek_min_us, seek_max_us, rpm] = values;
        if seek_min_us > seek_max_us {
            return Err(format!(
                "seek_min_us ({seek_min_us}) is above seek_max_us ({seek_max_us})"
            ));
        }
        Ok(DevSimParams {
            model: name.to_string(),
            servers,
            req_us,
            mb_s,
            flush_us,
            seek_min_us,
            seek_max_us,
            rpm,
        })
    }

    fn values(&self) -> [u32; 7] {
        [
            self.servers,
            self.req_us,
            self.mb_s,
            self.flush_us,
            self.seek_min_us,
            self.seek_max_us,
            self.rpm,
        ]
    }

    /// Whether no request ever costs anything.
    fn is_free(&self) -> bool {
        self.values()[1..].iter().all(|&v| v == 0)
    }
}

impl fmt::Display for DevSimParams {
    /// The full spelling, every parameter included, as parse accepts it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.model)?;
        for (name, value) in PARAM_NAMES.iter().zip(self.values()) {
            write!(f, ":{name}={value}")?;
        }
        Ok(())
    }
}

/// One request as the model sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    Read { offset: u64, len: u64 },
    Write { offset: u64, len: u64 },
    Flush,
}

/// The model's state: where the head is and when each server is free,
/// as time since the device was created.
#[derive(Debug)]
pub struct Timeline {
    params: DevSimParams,
    device_size: u64,
    head: u64,
    /// When the last request to complete did so.
    last_done: Duration,
    /// Completion times of the requests admitted so far that may still be
    /// queued or in service.
    queued: Vec<Duration>,
    free_at: Vec<Duration>,
}

impl Timeline {
    pub fn new(params: DevSimParams, device_size: u64) -> Timeline {
        let servers = params.servers.max(1) as usize;
        Timeline {
            params,
            device_size: device_size.max(1),
            head: 0,
            last_done: Duration::ZERO,
            queued: Vec::new(),
            free_at: vec![Duration::ZERO; servers],
        }
    }

    /// The time the device spends on `req` once in service, after the disk
    /// sat idle for `idle`, with `ahead` requests queued before it; moves
    /// the head.
    pub fn service_time(&mut self, req: Request, idle: Duration, ahead: usize) -> Duration {
        let p = &self.params;
        let (offset, len) = match req {
            Request::Flush => return Duration::from_micros(p.flush_us as u64),
            Request::Read { offset, len } | Request::Write { offset, len } => (offset, len),
        };
        let mut micros = p.req_us as f64;
        if p.mb_s > 0 {
            micros += len as f64 / p.mb_s as f64;
        }
        if offset != self.head {
            let distance = offset.abs_diff(self.head) / (ahead as u64 + 1);
            micros += self.positioning_micros(distance, ahead);
        } else if !idle.is_zero() && p.rpm > 0 {
            // The sector passed under the head while the disk was idle.
            let rotation = 60e6 / p.rpm as f64;
            micros += rotation - (idle.as_nanos() as f64 / 1000.0) % rotation;
        }
        self.head = offset.saturating_add(len);
        Duration::from_nanos((micros * 1000.0) as u64)
    }

    /// Seek over `distance` bytes plus half a rotation, shortened by a
    /// command queue holding `ahead` other requests.
    fn positioning_micros(&self, distance: u64, ahead: usize) -> f64 {
        let p = &self.params;
        let mut micros = 0.0;
        if p.seek_max_us > 0 {
            let frac = (distance as f64 / self.device_size as f64).min(1.0);
            micros += p.seek_min_us as f64 + (p.seek_max_us - p.seek_min_us) as f64 * frac.sqrt();
        }
        if p.rpm > 0 {
            micros += 30e6 / p.rpm as f64 / (ahead as f64 + 1.0);
        }
        micros
    }

    /// Admits `req` arriving at `now`; returns when it completes.
    pub fn admit(&mut self, now: Duration, req: Request) -> Duration {
        if self.params.servers == 0 {
            return now + self.service_time(req, Duration::ZERO, 0);
        }
        self.queued.retain(|&done| done > now);
        let ahead = self.queued.len();
        // A flush waits for everything in service before it.
        let ready = match req {
            Request::Flush => self.free_at.iter().copied().max().unwrap_or_default(),
            _ => Duration::ZERO,
        };
        let (slot, free) = self
            .free_at
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(_, t)| t)
            .unwrap_or_default();
        let start = now.max(free).max(ready);
        let idle = start.saturating_sub(self.last_done);
        let done = start + self.service_time(req, idle, ahead);
        self.queued.push(done);
        self.free_at[slot] = done;
        self.last_done = self.last_done.max(done);
        done
    }
}

/// A block device that takes as long as its model says.
pub struct SimDevice {
    inner: Arc<dyn BlockDevice>,
    free: bool,
    origin: Instant,
    timeline: Mutex<Timeline>,
}

impl SimDevice {
    pub fn new(inner: Arc<dyn BlockDevice>, params: DevSimParams) -> SimDevice {
        let size = inner.size();
        SimDevice {
            inner,
            free: params.is_free(),
            origin: Instant::now(),
            timeline: Mutex::new(Timeline::new(params, size)),
        }
    }

    /// Runs `op` and returns when the model says `req` completes.
    fn timed<T>(&self, req: Request, op: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        if self.free {
            return op();
        }
        let done = self.timeline.lock().admit(self.origin.elapsed(), req);
        let out = op()?;
        self.sleep_until(done);
        Ok(out)
    }

    /// Sleeps until `done` (time since `origin`). A plain sleep overshoots
    /// by the timer slack (50 µs by default), which would add to every
    /// request; a 1 µs slack keeps the model's costs what they say.
    fn sleep_until(&self, done: Duration) {
        thread_local! {
            static SLACK_SET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        }
        if !SLACK_SET.with(|s| s.replace(true)) {
            // SAFETY: PR_SET_TIMERSLACK takes an integer and changes only
            // the calling thread's timer slack; no memory is passed.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
        }
        if let Some(left) = done.checked_sub(self.origin.elapsed()) {
            std::thread::sleep(left);
        }
    }
}

impl BlockDevice for SimDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let len = buf.len() as u64;
        self.timed(Request::Read { offset, len }, || {
            self.inner.read_at(buf, offset)
        })
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let len = buf.len() as u64;
        self.timed(Request::Write { offset, len }, || {
            self.inner.write_at(buf, offset)
        })
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()> {
        let len = bufs.iter().map(|b| b.len() as u64).sum();
        self.timed(Request::Write { offset, len }, || {
            self.inner.write_vectored_at(bufs, offset)
        })
    }

    fn flush(&self) -> io::Result<()> {
        self.timed(Request::Flush, || self.inner.flush())
    }

    fn size(&self) -> u64 {
        self.inner.size()
    }

    /// Passed to the backing store at no modelled cost.
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.discard(offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;

    const GIB: u64 = 1 << 30;
    /// Fixed parameters, so the tests do not follow recalibrations.
    const ARRAY4: &str = "array:servers=4:req_us=400:mb_s=200:flush_us=250";

    fn params(spec: &str) -> DevSimParams {
        DevSimParams::parse(spec).unwrap()
    }

    fn sata(overrides: &str) -> DevSimParams {
        params(&format!(
            "sata:servers=1:req_us=100:mb_s=70:flush_us=100:seek_min_us=800:seek_max_us=16000:rpm=7200{overrides}"
        ))
    }

    fn us(d: Duration) -> f64 {
        d.as_nanos() as f64 / 1000.0
    }

    #[test]
    fn parses_models_and_overrides() {
        assert_eq!(params("sata").rpm, 7200);
        assert_eq!(params("array").model, "array");
        assert!(params("ram").is_free());
        let p = params("sata:flush_us=8000:seek_max_us=12000");
        assert_eq!((p.flush_us, p.seek_max_us, p.rpm), (8000, 12000, 7200));
        assert_eq!(params(&p.to_string()), p);
        for bad in [
            "",
            "floppy",
            "sata:",
            "sata:rpm",
            "sata:rpm=fast",
            "sata:rpm=-1",
            "sata:colour=blue",
            "sata:seek_min_us=9:seek_max_us=8",
        ] {
            assert!(DevSimParams::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn request_costs_latency_plus_transfer() {
        let mut t = Timeline::new(params(ARRAY4), GIB);
        // 400 µs + 1 MB at 200 MB/s.
        let req = Request::Write {
            offset: 0,
            len: 1_000_000,
        };
        let d = t.service_time(req, Duration::ZERO, 0);
        assert!((us(d) - 5400.0).abs() < 1.0, "{d:?}");
        assert_eq!(
            t.service_time(Request::Flush, Duration::ZERO, 0),
            Duration::from_micros(250)
        );
    }

    #[test]
    fn sata_pays_for_position_but_not_for_sequential_requests() {
        let mut t = Timeline::new(sata(""), GIB);
        let mut cost =
            |offset| us(t.service_time(Request::Write { offset, len: 4096 }, Duration::ZERO, 0));
        let transfer = 100.0 + 4096.0 / 70.0;
        // The head starts at 0: the first request is sequential.
        assert!((cost(0) - transfer).abs() < 1.0);
        assert!((cost(4096) - transfer).abs() < 1.0);
        // Across the whole device: full seek and half a rotation.
        let far = cost(GIB - 4096);
        assert!((far - (transfer + 16_000.0 + 4166.7)).abs() < 20.0, "{far}");
        // A quarter of the way: the seek grows with the square root.
        let quarter = cost(GIB / 4 * 3 - 4096);
        let want = transfer + 800.0 + 15_200.0 * 0.5 + 4166.7;
        assert!((quarter - want).abs() < 20.0, "{quarter} vs {want}");
    }

    #[test]
    fn sequential_request_after_idle_waits_for_its_sector() {
        let mut t = Timeline::new(sata(":req_us=0:mb_s=0"), GIB);
        let w = |offset| Request::Write { offset, len: 4096 };
        let rotation = 60e6 / 7200.0;
        // Back to back: no rotational wait.
        let first = t.admit(Duration::ZERO, w(0));
        assert_eq!(first, Duration::ZERO);
        // Issued 1 ms after the previous completed: the sector has gone by.
        let later = first + Duration::from_millis(1);
        let waited = us(t.admit(later, w(4096)) - later);
        assert!((waited - (rotation - 1000.0)).abs() < 1.0, "{waited}");
    }

    #[test]
    fn a_deep_queue_shortens_positioning() {
        let mut t = Timeline::new(sata(":req_us=0:mb_s=0"), GIB);
        let alone = us(t.service_time(
            Request::Write {
                offset: GIB / 2,
                len: 0,
            },
            Duration::ZERO,
            0,
        ));
        let mut t = Timeline::new(sata(":req_us=0:mb_s=0"), GIB);
        let queued = us(t.service_time(
            Request::Write {
                offset: GIB / 2,
                len: 0,
            },
            Duration::ZERO,
            3,
        ));
        // A quarter of the distance (half the square-root seek term) and
        // a quarter of the rotational wait.
        let want = 800.0 + 15_200.0 * (0.125f64).sqrt() + 4166.7 / 4.0;
        assert!((queued - want).abs() < 20.0, "{queued} vs {want}");
        assert!(alone > 2.0 * queued);
        // Through admit: four requests arriving together at distant places.
        let mut t = Timeline::new(sata(":req_us=0:mb_s=0"), GIB);
        let now = Duration::ZERO;
        let costs: Vec<Duration> = (1..=4)
            .map(|i| {
                t.admit(
                    now,
                    Request::Write {
                        offset: i * GIB / 5,
                        len: 0,
                    },
                )
            })
            .collect();
        let gaps: Vec<f64> = costs.windows(2).map(|w| us(w[1] - w[0])).collect();
        assert!(gaps[0] > gaps[1] && gaps[1] > gaps[2], "{gaps:?}");
    }

    #[test]
    fn one_server_queues_requests_in_order() {
        let mut t = Timeline::new(sata(":rpm=0:seek_max_us=0:seek_min_us=0"), GIB);
        let w = |offset| Request::Write { offset, len: 0 };
        // Three requests arriving together finish 100 µs apart.
        let now = Duration::from_millis(1);
        let done: Vec<f64> = (0..3).map(|_| us(t.admit(now, w(0)) - now)).collect();
        assert_eq!(done, vec![100.0, 200.0, 300.0]);
        // One arriving after the queue drained waits for nothing.
        let later = Duration::from_millis(10);
        assert_eq!(us(t.admit(later, w(0)) - later), 100.0);
    }

    #[test]
    fn servers_work_in_parallel_and_flush_waits_for_all() {
        let mut t = Timeline::new(params(&format!("{ARRAY4}:mb_s=0")), GIB);
        let now = Duration::ZERO;
        let w = Request::Write {
            offset: 0,
            len: 4096,
        };
        let first: Vec<f64> = (0..4).map(|_| us(t.admit(now, w))).collect();
        assert_eq!(first, vec![400.0; 4]);
        // The fifth waits for a server.
        assert_eq!(us(t.admit(now, w)), 800.0);
        // The flush waits for the fifth, then costs 250 µs.
        assert_eq!(us(t.admit(now, Request::Flush)), 1050.0);
    }

    #[test]
    fn unlimited_servers_never_queue() {
        let mut t = Timeline::new(params(&format!("{ARRAY4}:servers=0:mb_s=0")), GIB);
        let w = Request::Write { offset: 0, len: 1 };
        for _ in 0..10 {
            assert_eq!(us(t.admit(Duration::ZERO, w)), 400.0);
        }
    }

    #[test]
    fn device_passes_data_through() {
        let inner: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(1 << 20).unwrap());
        let dev = SimDevice::new(inner.clone(), params("array:req_us=1:flush_us=1"));
        dev.write_at(&[7u8; 4096], 8192).unwrap();
        dev.flush().unwrap();
        let mut back = [0u8; 4096];
        inner.read_at(&mut back, 8192).unwrap();
        assert_eq!(back, [7u8; 4096]);
        dev.read_at(&mut back, 0).unwrap();
        assert_eq!(back, [0u8; 4096]);
        assert_eq!(dev.size(), 1 << 20);
        assert!(dev.write_at(&[0u8; 1], 1 << 20).is_err());
    }
}
