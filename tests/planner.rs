//! The planner on random steps (proptest): no two tensors live together share a
//! byte, every range is aligned and inside its arena, no arena passes the device's
//! limit, and every dispatch's operands are legal: under the all-`read_write`
//! rule when no two operands overlap, and as declared (random dispatches' read
//! and write sets, [`planner::plan_step`]) when none reads from an arena it
//! writes.
//! Native only (proptest).
#![cfg(not(target_arch = "wasm32"))]

use proptest::prelude::*;
use tidepool::planner::{self, Access, Lifetime, Limits, MemoryPlan};

/// A random step: births and deaths over 64 positions, sizes from 1 byte to 4 KiB.
fn step() -> impl Strategy<Value = Vec<Lifetime>> {
    prop::collection::vec((1u64..4096, 0u32..64, 1u32..32), 0..60).prop_map(|v| {
        v.into_iter()
            .map(|(size, birth, life)| Lifetime {
                size,
                birth,
                death: birth + life,
            })
            .collect()
    })
}

fn limits() -> impl Strategy<Value = Limits> {
    (2u32..9, 4096u64..40_000).prop_map(|(log, cap)| Limits {
        offset_alignment: 1 << log,
        max_arena_bytes: cap,
    })
}

/// The tensors live at position `at`: a dispatch there may bind any of them.
fn live_at(step: &[Lifetime], at: u32) -> Vec<usize> {
    (0..step.len())
        .filter(|&i| step[i].birth <= at && at < step[i].death)
        .collect()
}

fn check(step: &[Lifetime], limits: Limits, plan: &MemoryPlan) -> Result<(), TestCaseError> {
    prop_assert_eq!(plan.ranges.len(), step.len());
    for (t, r) in step.iter().zip(&plan.ranges) {
        prop_assert_eq!(r.offset % limits.offset_alignment, 0);
        prop_assert_eq!(r.size, t.bound_bytes());
        prop_assert!(r.size >= t.size && r.size % 4 == 0);
        prop_assert!(r.end() <= plan.arenas[r.arena], "{:?} past its arena", r);
    }
    for &arena in &plan.arenas {
        prop_assert!(arena <= limits.max_arena_bytes);
    }
    // Every dispatch binds tensors live together: pairwise disjoint, so all
    // read_write bindings of one arena never alias.
    for at in 0..100 {
        let operands = live_at(step, at);
        for (k, &i) in operands.iter().enumerate() {
            for &j in &operands[..k] {
                let (a, b) = (plan.ranges[i], plan.ranges[j]);
                prop_assert!(
                    !a.overlaps(&b),
                    "{:?} and {:?} live at {}: {:?} {:?}",
                    step[i],
                    step[j],
                    at,
                    a,
                    b
                );
            }
        }
    }
    // Tensors live together lie in disjoint ranges, whatever arenas they are in.
    prop_assert!(plan.reserved() >= planner::lower_bound(step));
    Ok(())
}

/// Random dispatches of `step`: each at a position, reading and writing some of
/// the tensors live there (an operand is either read or written in one dispatch).
fn dispatches(step: &[Lifetime], picks: &[(u32, u64)]) -> Vec<Access> {
    picks
        .iter()
        .map(|&(at, mask)| {
            let live = live_at(step, at);
            let mut access = Access::default();
            for (k, &i) in live.iter().enumerate().take(32) {
                match (mask >> (2 * k)) & 3 {
                    1 => access.reads.push(i as u32),
                    2 => access.writes.push(i as u32),
                    _ => {}
                }
            }
            access
        })
        .collect()
}

proptest! {
    #[test]
    fn plans_keeping_rivals_apart_are_legal_as_declared(
        step in step(),
        limits in limits(),
        picks in prop::collection::vec((0u32..64, any::<u64>()), 0..40),
    ) {
        let dispatches = dispatches(&step, &picks);
        let rivals = planner::rivals(step.len(), &dispatches);
        // Keeping rivals apart alone: legal as declared, whatever it costs.
        let apart = planner::plan_apart(&step, &rivals, limits).expect("plan");
        check(&step, limits, &apart)?;
        prop_assert_eq!(planner::dispatches_reading_their_arena(&apart, &dispatches), 0);
        for (i, rs) in rivals.iter().enumerate() {
            for &j in rs {
                prop_assert_ne!(apart.ranges[i].arena, apart.ranges[j as usize].arena);
            }
        }
        // The step's plan: rivals apart within 1% of the plain plan, else the plain one.
        let plan = planner::plan_step(&step, &dispatches, limits).expect("plan");
        check(&step, limits, &plan)?;
        let one = planner::plan(&step, limits).expect("plan");
        prop_assert!(plan.reserved() <= one.reserved() + one.reserved() / planner::APART_SLACK);
        if plan != one {
            prop_assert_eq!(planner::dispatches_reading_their_arena(&plan, &dispatches), 0);
        }
        // With no dispatch to keep apart it is the plain plan.
        prop_assert_eq!(
            planner::plan_step(&step, &[], limits).expect("plan"),
            planner::plan(&step, limits).expect("plan")
        );
    }

    #[test]
    fn plans_are_legal(step in step(), limits in limits()) {
        let plan = planner::plan(&step, limits).expect("every tensor fits the cap");
        check(&step, limits, &plan)?;
    }

    #[test]
    fn one_arena_holds_at_least_the_lower_bound(step in step()) {
        let limits = Limits { offset_alignment: 4, max_arena_bytes: u64::MAX / 4 };
        let plan = planner::plan(&step, limits).expect("plan");
        prop_assert!(plan.arenas.len() <= 1);
        prop_assert!(plan.reserved() >= planner::lower_bound(&step));
        check(&step, limits, &plan)?;
    }
}

#[test]
fn a_tensor_past_the_largest_binding_is_refused_naming_the_limit() {
    let step = [Lifetime {
        size: 5000,
        birth: 0,
        death: 1,
    }];
    let limits = Limits {
        offset_alignment: 256,
        max_arena_bytes: 4096,
    };
    let err = planner::plan(&step, limits).unwrap_err();
    assert!(err.contains("maxStorageBufferBindingSize"), "{err}");
}
