//! Reading the GPU time of each dispatch back ([`WgpuContext::dispatch_times`]).

use super::context::WgpuContext;
use super::lock;
use super::memory::Purpose;
use super::timing::DispatchTimes;
use crate::error::{Error, Result};

impl WgpuContext {
    /// The GPU time of every dispatch recorded since the last call (a context made
    /// with `time_dispatches`), in order; starts the next count. Call it outside a
    /// scope, after the work ran (a download waits for it).
    pub async fn dispatch_times(&self) -> Result<DispatchTimes> {
        let Some(timer) = &self.timer else {
            return Err(Error::Config(
                "this context does not time dispatches (ContextOptions::time_dispatches)".into(),
            ));
        };
        let (names, untimed) = {
            let mut t = lock(timer);
            (std::mem::take(&mut t.names), std::mem::take(&mut t.untimed))
        };
        if names.is_empty() {
            return Ok(DispatchTimes {
                dispatches: Vec::new(),
                untimed,
            });
        }
        let count = 2 * names.len() as u32;
        let resolved = self.memory.timestamps_buffer(u64::from(count) * 8);
        self.record(|encoder| {
            encoder.resolve_query_set(&lock(timer).queries, 0..count, &resolved, 0)
        });
        let stamps = self.download::<u64>(&resolved, count as usize).await;
        self.memory.retire(resolved, Purpose::Timestamps, false);
        let ns = f64::from(self.queue.get_timestamp_period());
        let dispatches = names
            .into_iter()
            .zip(stamps?.chunks_exact(2))
            .map(|(name, pair)| (name, pair[1].saturating_sub(pair[0]) as f64 * ns / 1e6))
            .collect();
        Ok(DispatchTimes {
            dispatches,
            untimed,
        })
    }
}
