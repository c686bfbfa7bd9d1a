//! The nodes the classes' pods are bound to, numbered once: pods outnumber
//! nodes thirty to one, and four layers ask about each pod's node. Each node
//! keeps the domains its labels put it in (zone, host), so a relabelled node
//! moves its pods' counts without looking at the pods.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::layer::{Dom, Why};
use crate::snapshot::{LabelLookup, Snapshot};

pub(super) type NodeId = u32;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct NodeSlot {
    pub name: Arc<str>,
    /// The API knows the node.
    pub known: bool,
    /// Its zone and host label values (numbered in `values`), if labelled.
    pub zone: Option<u32>,
    pub host: Option<u32>,
}

#[derive(Clone, Debug, Default)]
pub(super) struct NodeTable {
    pub slots: Vec<NodeSlot>,
    pub names: Vec<Arc<str>>,
    /// Label values (zones, hosts), numbered.
    pub values: Vec<Arc<str>>,
    by_name: FxHashMap<Arc<str>, NodeId>,
    /// Node names are interned, so most lookups hit on the pointer (of a
    /// name this table holds, so the address cannot be reused meanwhile).
    by_ptr: FxHashMap<usize, NodeId>,
    value_ids: FxHashMap<Arc<str>, u32>,
}

impl NodeTable {
    pub(super) fn id(&mut self, name: &Arc<str>, snapshot: &Snapshot, labels: (&str, Option<&str>)) -> NodeId {
        if let Some(&id) = self.by_ptr.get(&(name.as_ptr() as usize)) {
            return id;
        }
        let id = match self.by_name.get(&**name) {
            Some(&id) => id,
            None => {
                let id = NodeId::try_from(self.slots.len()).unwrap_or(NodeId::MAX);
                let slot = self.slot(name.clone(), snapshot, labels);
                self.slots.push(slot);
                self.names.push(name.clone());
                self.by_name.insert(name.clone(), id);
                id
            }
        };
        if Arc::ptr_eq(&self.slots[id as usize].name, name) {
            self.by_ptr.insert(name.as_ptr() as usize, id);
        }
        id
    }

    /// The number of a node already numbered, by pointer when it can.
    pub(super) fn lookup(&self, name: &Arc<str>) -> Option<NodeId> {
        self.by_ptr.get(&(name.as_ptr() as usize)).or_else(|| self.by_name.get(&**name)).copied()
    }

    pub(super) fn find(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }

    /// The node as the snapshot has it now.
    pub(super) fn slot(&mut self, name: Arc<str>, snapshot: &Snapshot, (zone, host): (&str, Option<&str>)) -> NodeSlot {
        let info = snapshot.nodes.get(&*name);
        let zone = info.and_then(|n| n.labels.label(zone)).map(|v| self.value(v));
        let host = host.and_then(|h| info.and_then(|n| n.labels.label(h))).map(|v| self.value(v));
        NodeSlot { name, known: info.is_some(), zone, host }
    }

    fn value(&mut self, v: &str) -> u32 {
        if let Some(&id) = self.value_ids.get(v) {
            return id;
        }
        let id = u32::try_from(self.values.len()).unwrap_or(u32::MAX);
        let v: Arc<str> = Arc::from(v);
        self.values.push(v.clone());
        self.value_ids.insert(v, id);
        id
    }
}

/// A node's domain in a layer named by one of its labels.
pub(super) fn by_label(node: NodeId, slot: &NodeSlot, value: Option<u32>) -> Dom {
    match (slot.known, value) {
        (true, Some(v)) => Dom::Known(v),
        _ => Dom::Unknown(Why::Node(node)),
    }
}
