//! Words the spec and the status share: which layer, which scope. Kept apart
//! so that spec (which names its status type) and status import one way only.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Whether the pool's numbers are per replica or fleet-wide: defined with the
/// pool-config schema, which carries it to every enforcer.
pub use bulkhead_admission::pool_config::Scope;

/// A layer of the stack that two classes may share.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema)]
pub enum Layer {
    /// Same pod or container: a shared heap and garbage collector.
    Process,
    /// Same node: a shared kernel, page cache and NIC.
    Node,
    /// Same kernel: same node without a sandboxing RuntimeClass.
    Kernel,
    /// Same topology.kubernetes.io/zone.
    Zone,
    /// Same machine under the node (hypervisor).
    Host,
    /// Same database instance behind the endpoints the classes use.
    Database,
}

impl Layer {
    pub const ALL: [Layer; 6] = [Layer::Process, Layer::Node, Layer::Kernel, Layer::Zone, Layer::Host, Layer::Database];
}
