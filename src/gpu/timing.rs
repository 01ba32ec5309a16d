//! GPU time of each dispatch, for `tidepool bench kernels` (`ContextOptions::time_dispatches`).
//!
//! Each timed dispatch runs in a compute pass of its own whose beginning and end
//! write a timestamp (the `timestamp-query` feature, native and WebGPU alike: no
//! timestamps inside passes needed). The query set holds the pairs of the
//! dispatches recorded since the last [`DispatchTimer::take`]; past its capacity,
//! further dispatches run untimed and are counted. Browsers may round timestamps
//! (Chrome to 100 µs unless its developer features are on), so figures from a
//! browser are coarse; natively they are the device's.

/// Dispatches timed between two reads: the query set's limit is 4096 timestamps.
pub const CAPACITY: u32 = wgpu::QUERY_SET_MAX_QUERIES / 2;

pub(crate) struct DispatchTimer {
    pub queries: wgpu::QuerySet,
    /// The kernel of each timed dispatch, in order.
    pub names: Vec<&'static str>,
    /// Dispatches past the capacity since the last read.
    pub untimed: u64,
}

impl DispatchTimer {
    pub fn new(device: &wgpu::Device) -> Self {
        DispatchTimer {
            queries: device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("dispatch timestamps"),
                ty: wgpu::QueryType::Timestamp,
                count: 2 * CAPACITY,
            }),
            names: Vec::new(),
            untimed: 0,
        }
    }

    /// The query indices for the next dispatch of `kernel` (begin, end), or `None`
    /// when the set is full.
    pub fn next(&mut self, kernel: &'static str) -> Option<u32> {
        let index = self.names.len() as u32;
        if index >= CAPACITY {
            self.untimed += 1;
            return None;
        }
        self.names.push(kernel);
        Some(2 * index)
    }
}

/// What [`crate::gpu::WgpuContext::dispatch_times`] returns: each timed dispatch's
/// kernel and GPU milliseconds, in recording order, and how many ran untimed.
#[derive(Clone, Debug, Default)]
pub struct DispatchTimes {
    pub dispatches: Vec<(&'static str, f64)>,
    pub untimed: u64,
}

impl DispatchTimes {
    /// Launches and milliseconds per kernel, the costliest first. A specialized
    /// kernel (`name#flags`) counts under its kernel's name.
    pub fn by_kernel(&self) -> Vec<(&'static str, u64, f64)> {
        let mut totals: Vec<(&'static str, u64, f64)> = Vec::new();
        for &(name, ms) in &self.dispatches {
            let name = name.split('#').next().unwrap_or(name);
            match totals.iter_mut().find(|t| t.0 == name) {
                Some(t) => {
                    t.1 += 1;
                    t.2 += ms;
                }
                None => totals.push((name, 1, ms)),
            }
        }
        totals.sort_by(|a, b| b.2.total_cmp(&a.2));
        totals
    }

    pub fn total_ms(&self) -> f64 {
        self.dispatches.iter().map(|d| d.1).sum()
    }
}
