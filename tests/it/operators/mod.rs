//! Operators' controls: pausing keys and jobs fleet-wide, the run history
//! ring, what runs for slots missed while the fleet was down, triggers that
//! arrive during a run, the record of who did what, and the state a key
//! reads as.

mod audit;
mod catch_up;
mod history;
mod key_state;
mod pause;
mod resume;
mod revoke;
mod trigger;
