//! What the controller does with its nodes, on the running [`Controller`](super::shared::Controller):
//! enrollment (`enrollment`), taking a heartbeat (`heartbeat`, `heartbeat_answer`), marking a
//! node changed on its way to the store (`node_changes`), placing and deleting VMs
//! (`placement`) and the background jobs (`jobs`). HTTP is above this layer, in `http`.

pub mod enrollment;
pub mod heartbeat;
pub mod heartbeat_answer;
pub mod jobs;
pub mod node_changes;
pub mod placement;
