//! Operators' controls: pausing keys and jobs fleet-wide, the run history
//! ring, what runs for slots missed while the fleet was down, triggers that
//! arrive during a run, and the record of who did what.

mod audit;
mod catch_up;
mod history;
mod pause;
mod resume;
mod revoke;
mod trigger;
