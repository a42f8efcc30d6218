//! The controller's HTTP face: the route table (`routes`), the API's handlers (`api`), domain
//! errors as answers (`api_failures`), the heartbeat's fast door ahead of the router
//! (`heartbeat_route`), who may call an operator route (`operator_access`) and the reference
//! site (`docs`).

pub mod api;
pub mod api_failures;
pub mod docs;
pub mod heartbeat_route;
pub mod operator_access;
pub mod routes;
