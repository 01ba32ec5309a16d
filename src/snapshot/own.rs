//! tidepool's own allocation trace (`tidepool train --trace`, docs/trace.md) into
//! [`Recording`]s: one a traced step.
//!
//! A tensor is a birth (`hit`, `miss`, `oversize`, `unpooled`) to the death of the
//! same buffer (`release`, `reject`, `discard`), or of the same range of an arena
//! (the planned policy's events carry their `offset`); a death with no birth in the
//! step was live when it began, a birth with no death is live at its end. The pool's
//! reserved bytes after each event are its `in_use` plus `held`, and its segments
//! the GPU buffers from `create` to `destroy` or `evict` (those made before the step
//! are in its reserved bytes only). The tensors live across the whole step (weights,
//! optimizer state) are in the step's `in_use_at_start` and in no event: one
//! allocation live throughout stands for them.

use rustc_hash::FxHashMap;

use super::{Allocation, Frame, Recording, Reserved, Segment, Stacks};
use crate::pool::SizePolicy;
use crate::trace::EventKind;
use crate::trace::{StepTrace, Trace};
use crate::Error;

/// Reads each step of a trace file.
pub fn read(bytes: &[u8]) -> Result<Vec<Recording>, Error> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| Error::Trace(format!("not UTF-8 text, so not a tidepool trace: {e}")))?;
    let trace = Trace::from_json(text).map_err(Error::Trace)?;
    trace
        .steps
        .iter()
        .map(|step| recording(step, &trace))
        .collect()
}

/// One traced step of `trace` as a recording.
pub fn recording(step: &StepTrace, trace: &Trace) -> Result<Recording, Error> {
    let policy = SizePolicy::parse(&trace.policy).unwrap_or_default();
    let allocator = format!(
        "tidepool {}",
        crate::replay::pool_label(policy, trace.fit_ratio)
    );
    let n = u32::try_from(step.events.len())
        .ok()
        .filter(|&n| n < u32::MAX - 1)
        .ok_or_else(|| Error::Trace("a step of 2^32 - 2 events or more".into()))?;
    let end = n + 1;
    let mut out = Recording {
        label: format!("step {} ({})", step.step, step.label),
        allocator,
        events: n,
        max_buffer_size: trace.max_buffer_size,
        planned_peak: step.peak_reserved.filter(|_| policy == SizePolicy::Planned),
        ..Recording::default()
    };
    // One frame an (op, layer), one stack a frame.
    let mut stacks = Stacks::default();
    let mut stack_of: FxHashMap<(&str, Option<u32>), u32> = FxHashMap::default();
    // A tensor by its buffer and, at a planned range, its offset in the arena.
    let mut open: FxHashMap<(u64, Option<u64>), usize> = FxHashMap::default();
    // Buffer id -> its segment, while it exists.
    let mut buffers: FxHashMap<u64, usize> = FxHashMap::default();
    let mut carried_in = 0u64;
    let mut reserved = Vec::with_capacity(step.events.len());
    let mut last = step.in_use_at_start.saturating_add(step.held_at_start);
    for (i, e) in step.events.iter().enumerate() {
        let at = i as u32 + 1;
        let now = e.in_use.checked_add(e.held).ok_or_else(|| {
            Error::Trace(format!(
                "step {} event {i}: in_use + held passes 2^64 bytes",
                step.step
            ))
        })?;
        if now != last {
            reserved.push((at, now));
            last = now;
        }
        match e.kind {
            EventKind::Create => {
                buffers.insert(e.buffer, out.segments.len());
                out.segments.push(Segment {
                    address: e.buffer,
                    size: e.class,
                    stream: 0,
                    start: at,
                    end,
                });
            }
            EventKind::Destroy | EventKind::Evict => match buffers.remove(&e.buffer) {
                Some(j) => out.segments[j].end = at,
                None => out.segments.push(Segment {
                    address: e.buffer,
                    size: e.class,
                    stream: 0,
                    start: 0,
                    end: at,
                }),
            },
            _ => {}
        }
        if !(e.kind.is_birth() || e.kind.is_death()) {
            continue;
        }
        let stack = *stack_of.entry((e.op.as_ref(), e.layer)).or_insert_with(|| {
            stacks.table.push(Frame {
                filename: e.layer.map_or(String::new(), |l| format!("layer {l}")),
                line: 0,
                name: e.op.to_string(),
            });
            stacks.push([stacks.table.len() as u32 - 1])
        });
        let poolable = e.purpose == "storage";
        let allocations = &mut out.allocations;
        if e.kind.is_birth() {
            open.insert((e.buffer, e.offset), allocations.len());
            allocations.push(Allocation {
                size: e.requested,
                block: e.class,
                address: e.buffer,
                stream: 0,
                start: at,
                end,
                released: end,
                stack,
                poolable: poolable && !matches!(e.kind, EventKind::Unpooled | EventKind::Oversize),
            });
        } else {
            match open.remove(&(e.buffer, e.offset)) {
                Some(j) => {
                    allocations[j].end = at;
                    allocations[j].released = at;
                }
                None => {
                    carried_in = carried_in.saturating_add(e.class);
                    allocations.push(Allocation {
                        size: e.requested,
                        block: e.class,
                        address: e.buffer,
                        stream: 0,
                        start: 0,
                        end: at,
                        released: at,
                        stack,
                        poolable: poolable && e.kind != EventKind::Discard,
                    });
                }
            }
        }
    }
    let across = step.in_use_at_start.saturating_sub(carried_in);
    if across > 0 {
        out.allocations.push(Allocation {
            size: across,
            block: across,
            start: 0,
            end,
            released: end,
            poolable: false,
            ..Allocation::default()
        });
        out.notes.push(format!(
            "{}: {across} bytes live across the whole step (weights, optimizer state) \
             count as one allocation",
            out.label
        ));
    }
    out.reserved = Reserved {
        at_start: step.in_use_at_start.saturating_add(step.held_at_start),
        changes: reserved,
    };
    out.stacks = stacks;
    Ok(out)
}
