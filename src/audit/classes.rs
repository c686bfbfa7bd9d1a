//! Which classes a pod belongs to, decided once per pod: the Bulkhead's
//! selectors are matched against namespaces once, so a pod costs one map
//! lookup and its own namespace's pod selectors.

use rustc_hash::FxHashMap;

use crate::{
    select::{Matcher, Selection, Source},
    snapshot::{ObjectKey, PodInfo, Snapshot},
};

/// A set of classes (a Bulkhead has at most 64; see `plan::validate`).
pub(super) type ClassSet = u64;

pub(super) fn classes_in(mut set: ClassSet) -> impl Iterator<Item = u16> {
    std::iter::from_fn(move || {
        let c = set.trailing_zeros();
        (set != 0).then(|| {
            set &= set - 1;
            c as u16
        })
    })
}

#[derive(Clone, Debug)]
pub(super) struct Classifier {
    /// Namespace → the selector classes drawing pods from it, with their pod selectors.
    by_namespace: FxHashMap<String, Vec<(u16, Matcher)>>,
    /// spec.workload: its namespace, selector, and the classes running in its pods.
    workload: Option<(String, Matcher, ClassSet)>,
    /// Per class: the namespaces its pods come from, in order.
    pub namespaces: Vec<Vec<String>>,
    pub names: Vec<String>,
    pub sources: Vec<Source>,
}

impl Classifier {
    pub(super) fn new(selection: &Selection<'_>, snapshot: &Snapshot) -> Self {
        let n = selection.classes.len();
        let mut by_namespace: FxHashMap<String, Vec<(u16, Matcher)>> = FxHashMap::default();
        let mut namespaces = vec![Vec::new(); n];
        let mut sources = Vec::with_capacity(n);
        let workload_ns = selection.bulkhead.spec.workload.as_ref().map(|w| w.namespace.clone());
        let workload_matcher = selection.workload.clone().filter(|_| workload_ns.is_some());
        let mut workload_set: ClassSet = 0;
        for (i, class) in selection.classes.iter().enumerate().take(64) {
            let c = i as u16;
            match (&class.pods, &workload_matcher) {
                (Some(pods), _) => {
                    sources.push(Source::Selectors);
                    for ns in snapshot.namespaces.values().filter(|ns| pods.namespaces.matches(&ns.labels)) {
                        by_namespace.entry(ns.name.clone()).or_default().push((c, pods.pods.clone()));
                        namespaces[i].push(ns.name.clone());
                    }
                }
                (None, Some(_)) => {
                    sources.push(Source::Workload);
                    workload_set |= 1 << c;
                    namespaces[i].extend(workload_ns.clone());
                }
                (None, None) => sources.push(Source::Unknown),
            }
        }
        let workload =
            workload_ns.zip(workload_matcher).filter(|_| workload_set != 0).map(|(ns, m)| (ns, m, workload_set));
        let names = selection.classes.iter().map(|c| c.spec.name.clone()).collect();
        Self { by_namespace, workload, namespaces, names, sources }
    }

    /// Every namespace some class draws from, in order.
    pub(super) fn all_namespaces(&self) -> Vec<&str> {
        let mut all: Vec<&str> = self.by_namespace.keys().map(String::as_str).collect();
        all.extend(self.workload.as_ref().map(|(ns, _, _)| ns.as_str()));
        all.sort_unstable();
        all.dedup();
        all
    }

    /// The classes a pod does the work of (none once it has finished).
    pub(super) fn classes_of(&self, key: &ObjectKey, pod: &PodInfo) -> ClassSet {
        self.classes_in_namespace(self.by_namespace.get(&key.namespace).map(Vec::as_slice), &key.namespace, pod)
    }

    /// As `classes_of`, with the namespace's selectors already looked up.
    pub(super) fn classes_in_namespace(
        &self,
        selectors: Option<&[(u16, Matcher)]>,
        namespace: &str,
        pod: &PodInfo,
    ) -> ClassSet {
        if pod.finished {
            return 0;
        }
        let mut set: ClassSet = 0;
        for (c, matcher) in selectors.unwrap_or_default() {
            if matcher.matches(&pod.labels) {
                set |= 1 << c;
            }
        }
        if let Some((ns, matcher, classes)) = &self.workload {
            if ns == namespace && matcher.matches(&pod.labels) {
                set |= classes;
            }
        }
        set
    }

    pub(super) fn selectors_of(&self, namespace: &str) -> Option<&[(u16, Matcher)]> {
        self.by_namespace.get(namespace).map(Vec::as_slice)
    }
}
