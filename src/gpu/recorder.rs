//! The command recorder: the encoder being recorded, the compute pass open in it,
//! the scopes around it, and when a scope's work is submitted in parts
//! (`submit_every`).

/// The command encoder being recorded, the compute pass open in it, and how deeply
/// scopes are nested.
///
/// Consecutive dispatches share one compute pass: beginning and ending a pass per
/// dispatch is host work (several calls into the browser on the web) that buys
/// nothing, since WebGPU makes every dispatch its own synchronization scope, so a
/// dispatch sees what the previous one in the same pass wrote. The pass is ended
/// before any encoder command (copy, clear) and before the submit.
#[derive(Default)]
pub(crate) struct Recorder {
    pub encoder: Option<wgpu::CommandEncoder>,
    pub pass: Option<wgpu::ComputePass<'static>>,
    pub depth: u32,
    /// Dispatches recorded since the last submit.
    pub dispatches: u32,
    /// Parts of the open scope submitted so far (`submit_every`).
    pub parts: u32,
    /// The kernel whose pipeline the open pass has set, if any, and whether that
    /// pipeline binds everything `read_write`: a dispatch of the same pipeline skips
    /// `set_pipeline` (a WebGPU call of 1-2 us through Dawn).
    pub pipeline_set: Option<(&'static str, bool)>,
    /// The open outermost scope goes out in one submit, whatever `submit_every`
    /// ([`super::WgpuContext::scope_in_one_submit`]).
    pub whole: bool,
}

impl Recorder {
    /// Ends the open pass, if any, and hands over the encoder.
    pub fn take_encoder(&mut self) -> Option<wgpu::CommandEncoder> {
        self.pass = None;
        self.dispatches = 0;
        self.encoder.take()
    }

    /// What follows the dispatch just recorded, with the context's `submit_every`.
    pub fn after_dispatch(&self, submit_every: u32) -> AfterDispatch {
        if self.depth == 0 {
            AfterDispatch::Submit
        } else if submit_every > 0
            && !self.whole
            && self.dispatches >= part_size(submit_every, self.parts)
        {
            AfterDispatch::SubmitPart
        } else {
            AfterDispatch::Record
        }
    }
}

/// What follows a dispatch: outside any scope it is submitted at once; inside one,
/// the scope's work so far goes out in parts of up to `submit_every` dispatches.
pub(super) enum AfterDispatch {
    Record,
    SubmitPart,
    Submit,
}

/// Dispatches in the first part of a scope (`submit_every`): each later part is twice
/// the one before, up to `submit_every`. The GPU starts after a few dispatches instead
/// of a whole part, and the host, recording twice as much while the GPU runs each
/// part, stays ahead of it. Measured against equal parts of 32 on the H200
/// (BENCHMARKS.md, "Submitting a step in parts"); 4 beat 8.
const FIRST_PART: u32 = 4;

/// How many dispatches part `part` (from 0) of a scope takes before it is submitted.
fn part_size(submit_every: u32, part: u32) -> u32 {
    // In u64, so that far parts saturate instead of shifting bits out.
    let size = u64::from(FIRST_PART) << part.min(32);
    size.min(u64::from(submit_every)) as u32
}

/// How many submits a scope of `dispatches` dispatches takes with `submit_every`
/// (0: one): its parts ([`super::ContextOptions::submit_every`]), the last holding
/// the rest.
pub fn scope_submits(dispatches: u64, submit_every: u32) -> u64 {
    if submit_every == 0 {
        return 1;
    }
    let (mut left, mut parts) = (dispatches, 0u32);
    loop {
        let size = u64::from(part_size(submit_every, parts));
        parts += 1;
        if left <= size {
            return u64::from(parts);
        }
        left -= size;
    }
}

#[cfg(test)]
mod tests {
    use super::part_size;

    #[test]
    fn parts_start_at_four_dispatches_and_double_up_to_submit_every() {
        let sizes = |every| {
            (0..8)
                .map(|part| part_size(every, part))
                .collect::<Vec<_>>()
        };
        assert_eq!(sizes(32), [4, 8, 16, 32, 32, 32, 32, 32]);
        assert_eq!(sizes(20), [4, 8, 16, 20, 20, 20, 20, 20]);
        assert_eq!(sizes(3), [3; 8]);
        assert_eq!(sizes(1), [1; 8]);
        // Far parts of a huge submit_every neither overflow nor pass it.
        assert_eq!(part_size(u32::MAX, 40), u32::MAX);
        assert_eq!(part_size(1 << 20, 31), 1 << 20);
    }

    #[test]
    fn a_scope_is_submitted_in_as_many_parts_as_its_sizes_take() {
        use super::scope_submits;
        assert_eq!(scope_submits(0, 32), 1);
        assert_eq!(scope_submits(4, 32), 1);
        assert_eq!(scope_submits(5, 32), 2);
        assert_eq!(scope_submits(28, 32), 3);
        assert_eq!(scope_submits(29, 32), 4);
        assert_eq!(scope_submits(60, 32), 4);
        assert_eq!(scope_submits(61, 32), 5);
        assert_eq!(scope_submits(40, 3), 14);
        assert_eq!(scope_submits(1_000, 0), 1);
    }
}
