//! Webhooks (SPEC §16): the deliverer of the store's event log (`deliver`) and the body of
//! an event (`body`).

pub mod body;
pub mod deliver;
