//! Operators' controls: pausing keys and jobs fleet-wide, the run history
//! ring, and what runs for slots missed while the fleet was down.

mod catch_up;
mod history;
mod pause;
mod resume;
mod revoke;
