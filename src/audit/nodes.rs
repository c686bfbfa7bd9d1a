//! The nodes the classes' pods are bound to, resolved once per audit: pods
//! outnumber nodes thirty to one, and four layers ask about each pod's node.

use rustc_hash::FxHashMap;

use super::domains::{Located, NodeId};
use crate::{
    select::Members,
    snapshot::{NodeInfo, Snapshot},
};

pub struct NodeTable<'a> {
    pub names: Vec<&'a str>,
    /// None: the pod names a node the API does not know.
    pub info: Vec<Option<&'a NodeInfo>>,
}

/// Each class's pods with their nodes, and the table the node ids index.
pub fn locate<'a>(members: Vec<Members<'a>>, snapshot: &'a Snapshot) -> (Vec<Located<'a>>, NodeTable<'a>) {
    let mut table = NodeTable { names: Vec::new(), info: Vec::new() };
    // Node names are interned, so most lookups hit on the pointer; equal
    // names behind different pointers still resolve by content.
    let mut by_ptr: FxHashMap<usize, NodeId> = FxHashMap::default();
    let mut by_name: FxHashMap<&'a str, NodeId> = FxHashMap::default();
    let mut located = Vec::with_capacity(members.len());
    for m in members {
        let nodes = m
            .pods
            .iter()
            .map(|(_, pod)| {
                let name: &'a str = pod.node.as_deref()?;
                let ptr = name.as_ptr() as usize;
                if let Some(&id) = by_ptr.get(&ptr) {
                    return Some(id);
                }
                let id = *by_name.entry(name).or_insert_with(|| {
                    table.names.push(name);
                    table.info.push(snapshot.nodes.get(name));
                    NodeId::try_from(table.names.len() - 1).unwrap_or(NodeId::MAX)
                });
                by_ptr.insert(ptr, id);
                Some(id)
            })
            .collect();
        located.push(Located { class: m.class, source: m.source, pods: m.pods, nodes });
    }
    (located, table)
}
