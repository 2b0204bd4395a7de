//! Behaviour of the store through the `JobStore` trait.

// The suite is a folder (one module per concern); the helpers every store test shares stay
// beside the other test files.
#[path = "../common/mod.rs"]
mod common;

use std::sync::{Arc, Barrier};

use bftp_core::{InvalidTransition, JobEvent, JobOutcome, JobState, MemberState, Timestamp};
use bftp_store::{
    AttemptTranscript, DeliveryTry, HistoryEvent, JobFilter, JobId, JobStore, LastReply,
    MemberUpdate, NewMember, OutboxState, StateCounts, StateFilter, StoreError, Submitted,
};
use common::*;

fn kinds(store: &dyn JobStore, id: JobId) -> Vec<String> {
    store
        .history(id)
        .unwrap()
        .into_iter()
        .map(|h| h.kind)
        .collect()
}

fn member_states(store: &dyn JobStore, id: JobId) -> Vec<MemberState> {
    store
        .members(id)
        .unwrap()
        .into_iter()
        .map(|m| m.state)
        .collect()
}

mod events;
mod gates;
mod hostlimits;
mod jobs;
mod members;
mod meta;
mod outbox;
mod pairs;
mod queue;
mod watches;
