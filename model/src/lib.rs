//! A model of leasehold's lease protocol, checked with
//! [stateright](https://docs.rs/stateright): no two runs of a key overlap
//! in real time, no stale write lands, fences only grow, a due key runs,
//! once per slot, no more than N tenures or runs of a limited kind at once
//! — for every interleaving up to a bound.
//!
//! - [`db`]: the database (lease rows, fence sequence, fence table with its
//!   row lock, a `last_fence` column, the server clock, and the rules that
//!   end a fenced transaction with its tenure: the commit check and the idle
//!   bound, F5), the liveness sessions and their registrations (issue 40:
//!   a key whose owner's session is gone and silent for the grace is taken
//!   over before it expires), and the proposed slot rows of a fleet-wide
//!   limit per kind (issue 44, `model/fleet-limit.md`); every statement is
//!   one atomic transition
//!   citing its SQL and the Rust function that sends it.
//! - [`replica`]: a runtime — claims, batched renewal, `ensure`, the local
//!   deadline from the send instant and the server's `remaining`, stop,
//!   release, fenced writes; its liveness session's confirm, re-registration,
//!   re-point, and the stop deadline on a lost session.
//! - [`env`](mod@env): real time, clock rates within ρ, the network, and faults;
//!   [`clock`]: the rate of a clock, shared with the database.
//! - [`properties`]: what is checked, and how liveness is encoded.
//! - [`variants`]: mistakes put back on purpose, for the counterexample
//!   tests.
//!
//! The model itself, [`LeaseModel`], is split by concern: `config`
//! ([`Config`]), `state` ([`State`], [`Ghost`], [`Action`]), `machine` (the
//! type and which actions are enabled), `model` (the `stateright::Model`
//! impl), `steps` (one function per action), `statements` (requests and the
//! server running them), `receive` (replies), `time` (ticks and the
//! server's own steps), `faults`, and `runner` ([`check`]).
//!
//! See `model/README.md` for the bounds, state counts and how to run the
//! deeper check.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clock;
mod config;
pub mod db;
pub mod env;
mod faults;
mod machine;
mod model;
pub mod properties;
mod receive;
pub mod replica;
mod runner;
mod state;
mod statements;
mod steps;
mod time;
pub mod variants;

pub use config::Config;
pub use machine::LeaseModel;
pub use runner::{Outcome, check};
pub use state::{Action, Ghost, State};
pub use variants::Variant;
