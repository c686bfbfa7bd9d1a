//! Interned label strings. 150,000 pods carry a handful of labels each, drawn
//! from a few hundred distinct strings: sharing them keeps a stored pod small.

use std::{collections::HashSet, sync::Arc};

/// Read access to labels, whatever their storage.
pub trait LabelLookup {
    fn label(&self, key: &str) -> Option<&str>;
}

/// Pool of shared strings. Never shrinks: label vocabularies are small.
#[derive(Clone, Debug, Default)]
pub struct Interner(HashSet<Arc<str>>);

impl Interner {
    pub fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(existing) = self.0.get(s) {
            return existing.clone();
        }
        let new: Arc<str> = Arc::from(s);
        self.0.insert(new.clone());
        new
    }

    pub fn labels<'a>(&mut self, labels: impl IntoIterator<Item = (&'a String, &'a String)>) -> InternedLabels {
        let mut pairs: Vec<(Arc<str>, Arc<str>)> =
            labels.into_iter().map(|(k, v)| (self.intern(k), self.intern(v))).collect();
        pairs.sort();
        InternedLabels(pairs.into_boxed_slice())
    }
}

/// Sorted label pairs sharing their strings with an `Interner`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InternedLabels(Box<[(Arc<str>, Arc<str>)]>);

impl InternedLabels {
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }
}

impl LabelLookup for InternedLabels {
    fn label(&self, key: &str) -> Option<&str> {
        self.0.binary_search_by(|(k, _)| (**k).cmp(key)).ok().map(|i| &*self.0[i].1)
    }
}
