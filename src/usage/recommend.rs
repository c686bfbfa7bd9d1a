//! The recommendation, in per-replica units (what a proxy enforces). The rule:
//!
//! 1. Each class's target floor is its observed p95 in flight when the p95 is
//!    under `idle_ratio` of its floor (an idle reservation is lowered), else
//!    the larger of its floor and its p95 (a class that needs more is raised;
//!    a starved class's p95 is its ceiling). A critical class's target is at
//!    least 1, and so is any class's that has a floor today: removing a
//!    floor is a change of design, not of size. A class that saw no traffic
//!    at all keeps its floor: silence is no evidence of what it needs. A
//!    floor goes below 1 only when the other classes' observed p95s take the
//!    whole pool (step 2).
//! 2. When the targets do not fit in the capacity, each is cut towards its
//!    minimum (max(p95, 1 if critical)) in proportion to how far above it
//!    it is. Only when the minimums themselves do not fit (the p95s of
//!    classes busy at different times can add up to more than the pool) are
//!    they cut the same way, critical classes last: the result is always
//!    fundable.
//! 3. The surplus is re-derived: capacity minus the floors.
//! 4. A starved class's ceiling grows by `ceiling_growth`; every ceiling is
//!    then held between the new floor and floor + surplus (a ceiling left to
//!    default stays floor + surplus).

/// One class as the recommendation sees it, per replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Demand {
    pub reserved: u32,
    pub ceiling: u32,
    /// False when spec.classes[].ceiling is absent (it defaults to floor + surplus).
    pub ceiling_declared: bool,
    pub p95: u32,
    pub critical: bool,
    pub starved: bool,
    /// No request of the class in the window: nothing was in flight and nothing was rejected.
    pub silent: bool,
}

/// Floors, ceilings and the re-derived surplus, per replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sizing {
    pub reserved: Vec<u32>,
    pub ceiling: Vec<u32>,
    pub surplus: u32,
}

/// The lowest a class may be recommended: its p95, and 1 if critical or
/// if it has a floor today.
pub fn minimum(d: &Demand) -> u32 {
    d.p95.max(u32::from(d.critical || d.reserved > 0))
}

pub fn recommend(capacity: u32, classes: &[Demand], idle_ratio: f64, ceiling_growth: f64) -> Sizing {
    let target: Vec<u32> = classes
        .iter()
        .map(|d| {
            let idle = f64::from(d.p95) < idle_ratio * f64::from(d.reserved);
            if d.silent {
                d.reserved.max(minimum(d))
            } else if idle {
                minimum(d)
            } else {
                d.reserved.max(minimum(d))
            }
        })
        .collect();
    let minimums: Vec<u32> = classes.iter().map(minimum).collect();
    // What the use demands, without the floor of 1 kept for a class with a floor today.
    let demanded: Vec<u32> = classes.iter().map(|d| d.p95.max(u32::from(d.critical))).collect();
    let critical: Vec<u32> = classes.iter().map(|d| u32::from(d.critical)).collect();
    let budget = u64::from(capacity);
    let reserved = if sum(&minimums) <= budget {
        shrink(&target, &minimums, budget)
    } else if sum(&demanded) <= budget {
        // The other classes' observed needs take the whole pool: a floor kept only for form gives way.
        shrink(&target, &demanded, budget)
    } else if sum(&critical) <= budget {
        shrink(&minimums, &critical, budget)
    } else {
        shrink(&critical, &vec![0; classes.len()], budget)
    };
    // Σ reserved ≤ capacity by construction, so the difference fits in u32.
    let surplus = u32::try_from(budget - sum(&reserved).min(budget)).unwrap_or(0);
    let ceiling = classes
        .iter()
        .zip(&reserved)
        .map(|(d, &r)| {
            let most = r.saturating_add(surplus);
            if !d.ceiling_declared {
                return most;
            }
            let wanted = if d.starved {
                let grown = (f64::from(d.ceiling) * ceiling_growth).ceil();
                // A ceiling is a u32: the cast saturates, and the clamp below bounds it.
                (grown as u32).max(d.ceiling.saturating_add(1))
            } else {
                d.ceiling
            };
            wanted.clamp(r, most)
        })
        .collect();
    Sizing { reserved, ceiling, surplus }
}

fn sum(values: &[u32]) -> u64 {
    values.iter().map(|v| u64::from(*v)).sum()
}

/// Lower `values` towards `floors` (each floor ≤ its value) until their sum
/// is at most `budget`, each in proportion to its slack above its floor.
/// When the floors alone exceed the budget, the floors are returned.
fn shrink(values: &[u32], floors: &[u32], budget: u64) -> Vec<u32> {
    let floors: Vec<u32> = floors.iter().zip(values).map(|(f, v)| (*f).min(*v)).collect();
    let total = sum(values);
    if total <= budget {
        return values.to_vec();
    }
    let slack: Vec<u64> = values.iter().zip(&floors).map(|(v, f)| u64::from(v - f)).collect();
    let slack_total: u64 = slack.iter().sum();
    let excess = total - budget;
    if excess >= slack_total {
        return floors;
    }
    // Proportional cuts, rounded down; the units that remain come off the
    // classes with the most slack left, one each.
    let mut cut: Vec<u64> = slack
        .iter()
        .map(|s| u64::try_from(u128::from(*s) * u128::from(excess) / u128::from(slack_total)).unwrap_or(*s))
        .collect();
    let mut left = excess - cut.iter().sum::<u64>();
    while left > 0 {
        let Some(i) =
            (0..slack.len()).filter(|&i| slack[i] > cut[i]).max_by_key(|&i| (slack[i] - cut[i], usize::MAX - i))
        else {
            break;
        };
        cut[i] += 1;
        left -= 1;
    }
    values.iter().zip(cut).map(|(v, c)| v - u32::try_from(c).unwrap_or(*v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(reserved: u32, ceiling: u32, p95: u32, critical: bool, starved: bool) -> Demand {
        Demand { reserved, ceiling, ceiling_declared: true, p95, critical, starved, silent: false }
    }

    #[test]
    fn a_starved_class_is_raised_and_an_idle_one_lowered_within_capacity() {
        // capacity 10: a reserves 2 and is pinned at its ceiling 4; b reserves 6 and uses 1.
        let s = recommend(10, &[d(2, 4, 4, false, true), d(6, 8, 1, false, false)], 0.5, 1.5);
        assert_eq!(s.reserved, vec![4, 1]);
        assert_eq!(s.surplus, 5);
        assert_eq!(s.ceiling, vec![6, 6], "a grows by half; b keeps 8, held to floor + surplus");
    }

    #[test]
    fn targets_that_do_not_fit_are_cut_towards_their_p95() {
        // a wants its p95 6, b keeps its floor 6: 12 > 10, so b is cut to its p95 4.
        let s = recommend(10, &[d(3, 6, 6, false, true), d(6, 6, 4, false, false)], 0.5, 1.5);
        assert_eq!(s.reserved.iter().sum::<u32>(), 10);
        assert!(s.reserved[0] >= 6 && s.reserved[1] >= 4, "{:?}", s.reserved);
        assert_eq!(s.surplus, 0);
    }

    #[test]
    fn p95s_that_add_up_past_capacity_still_give_a_fundable_answer_critical_last() {
        let s = recommend(4, &[d(2, 4, 4, false, true), d(1, 4, 4, false, true), d(1, 1, 0, true, false)], 0.5, 1.5);
        assert!(s.reserved.iter().sum::<u32>() <= 4, "{:?}", s.reserved);
        assert_eq!(s.reserved[2], 1, "the critical class keeps 1");
    }

    #[test]
    fn no_floor_is_advised_to_zero_and_silence_keeps_a_floor() {
        // b is used lightly (p95 0), c saw no request at all: neither floor goes.
        let mut c = d(3, 10, 0, false, false);
        c.silent = true;
        let s = recommend(10, &[d(4, 10, 1, false, false), d(4, 10, 0, false, false), c], 0.5, 1.5);
        assert_eq!(s.reserved, vec![1, 1, 3]);
        // Only when another class needs the room is a silent floor cut: to 1 while the pool allows it,
        let mut c = d(6, 10, 0, false, false);
        c.silent = true;
        let s = recommend(10, &[d(4, 10, 8, false, true), c.clone()], 0.5, 1.5);
        assert_eq!(s.reserved, vec![8, 2]);
        // and to 0 only when the other's observed p95 takes the whole pool.
        let s = recommend(10, &[d(4, 10, 10, false, true), c], 0.5, 1.5);
        assert_eq!(s.reserved, vec![10, 0]);
    }

    #[test]
    fn an_undeclared_ceiling_stays_floor_plus_surplus() {
        let mut a = d(4, 0, 1, false, false);
        a.ceiling_declared = false;
        let s = recommend(10, &[a], 0.5, 1.5);
        assert_eq!((s.reserved[0], s.ceiling[0], s.surplus), (1, 10, 9));
    }
}
