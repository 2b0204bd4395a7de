mod foundation;
mod infra;
mod slow;
