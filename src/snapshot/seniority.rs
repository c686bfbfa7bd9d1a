//! When each Bulkhead was created. Two Bulkheads may want the same node or the
//! same workload; the older one (earlier `creationTimestamp`, then the smaller
//! name when both were created in the same second) wins, whichever of them
//! wrote first. The rule needs nothing but what every reconcile can see, so
//! both sides reach the same verdict without talking to each other.

use std::collections::BTreeMap;

use jiff::Timestamp;
use kube::api::ObjectMeta;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seniority(BTreeMap<String, Option<Timestamp>>);

impl Seniority {
    /// Record a Bulkhead; true when this changed what is known.
    pub fn insert(&mut self, meta: &ObjectMeta) -> bool {
        let Some(name) = meta.name.clone() else { return false };
        let created = meta.creation_timestamp.as_ref().map(|t| t.0);
        self.0.insert(name, created) != Some(created)
    }

    /// Whether `insert` would change nothing (a status write, say).
    pub fn holds(&self, meta: &ObjectMeta) -> bool {
        let created = meta.creation_timestamp.as_ref().map(|t| t.0);
        meta.name.as_ref().is_some_and(|name| self.0.get(name) == Some(&created))
    }

    /// Forget a deleted Bulkhead; true when it was known.
    pub fn remove(&mut self, name: &str) -> bool {
        self.0.remove(name).is_some()
    }

    pub fn knows(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    /// Whether `other`'s claims take precedence over `me`'s. An unknown
    /// claimant (a Bulkhead since deleted whose claim is left, or one not in
    /// the input) outranks everyone, and an unknown `me` (not yet seen by the
    /// watch) is outranked by everyone: either way nothing is taken on a guess.
    /// Without a timestamp (files) a Bulkhead counts as created last.
    pub fn outranks(&self, other: &str, me: &str) -> bool {
        match (self.0.get(other), self.0.get(me)) {
            (Some(theirs), Some(mine)) => rank(*theirs, other) < rank(*mine, me),
            _ => other != me,
        }
    }
}

/// Earlier first; a missing timestamp after every real one; then by name.
fn rank(created: Option<Timestamp>, name: &str) -> (bool, Option<Timestamp>, &str) {
    (created.is_none(), created, name)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn meta(name: &str, second: Option<i64>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            creation_timestamp: second.and_then(|s| Timestamp::from_second(s).ok()).map(Time),
            ..Default::default()
        }
    }

    #[test]
    fn the_older_wins_then_the_smaller_name_and_unknown_claims_are_never_taken() {
        let mut s = Seniority::default();
        assert!(s.insert(&meta("zeta", Some(100))));
        assert!(!s.insert(&meta("zeta", Some(100))), "an unchanged Bulkhead changes nothing");
        assert!(
            s.holds(&meta("zeta", Some(100))) && !s.holds(&meta("zeta", Some(101))) && !s.holds(&meta("new", None))
        );
        s.insert(&meta("alpha", Some(200)));
        s.insert(&meta("beta", Some(200)));
        s.insert(&meta("files", None));
        assert!(s.outranks("zeta", "alpha") && !s.outranks("alpha", "zeta"), "created first wins");
        assert!(s.outranks("alpha", "beta") && !s.outranks("beta", "alpha"), "same second: the smaller name");
        assert!(s.outranks("beta", "files") && !s.outranks("files", "beta"), "no timestamp counts as newest");
        assert!(!s.outranks("alpha", "alpha"), "never outranks itself");
        assert!(s.outranks("gone", "zeta"), "an unknown claimant is never displaced");
        assert!(s.outranks("zeta", "new") && s.outranks("alpha", "new"), "an unseen Bulkhead takes nothing");
        assert!(s.remove("zeta") && !s.remove("zeta"));
        assert!(s.outranks("zeta", "alpha"), "once deleted, its leftovers are still not taken");
    }
}
